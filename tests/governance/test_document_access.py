"""Per-document permissions from the source (sidecars and front matter), enforced on every
governed output, on the embedded file and on PostgreSQL.

The property test writes a corpus whose every document holds a secret word of its own and
gives each document a random permission source (none, its folder's sidecar, a sidecar rule
naming it, its front matter); then every tool and mode is asked as several callers, and no
output may hold the word of a document the caller may not read. A caller who may read
everything sees the stored community reports with the words (so the property is not
vacuous), and with the permission check removed the same check finds a leak (mutation).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from docgraph import DocGraph
from docgraph.errors import NotFound
from docgraph.governance import Caller, Governance, RoleAssignment, StaticEntitlements
from docgraph.governance.visibility import Visibility
from docgraph.serve.tools import DocgraphTools
from tests import backend_graphs
from tests.helpers import write_files

# Every test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

SIDECAR = ".docgraph-access.yaml"
#: Who is in which group (the policy declares it); carol audits everything.
MEMBERS = {"finance": ["alice", "carol"], "ops": ["bob", "carol"], "auditors": ["carol"]}
USERS = ("alice", "bob", "carol", "dave")
PRINCIPALS = ("user:alice", "user:bob", "group:finance", "group:ops")
FOLDERS = ("finance", "ops", "shared")
SHARED = ("Nordhaven Logistics shipped pallets with Castellan Freight; Quillon Vance signed "
          "the Tern T3 release for dock {n}.")


def _word(i: int) -> str:
    return f"Secretmark{chr(ord('a') + i)}x"


def _principals_of(user: str) -> set[str]:
    return {f"user:{user}", *(f"group:{g}" for g, users in MEMBERS.items() if user in users)}


def _governance(graph: DocGraph) -> DocgraphTools:
    grants = [RoleAssignment(u, "agent", "ops") for u in USERS]
    return DocgraphTools(Governance(graph, StaticEntitlements(grants, members=MEMBERS)))


def _outputs(tools: DocgraphTools, user: str) -> str:
    """Everything ``user`` is shown by every tool and mode that shows text."""
    caller = Caller(user)
    query = "Nordhaven Logistics Castellan Freight Quillon Vance Secretmark"
    shown: list[Any] = [
        tools.call("search_documents", caller, {"query_text": query, "k": 20, "mode": mode})
        for mode in ("vector_first", "graph_first", "global")]
    shown += [[(h.text, h.title, h.doc_id) for h in tools.governance.search(
        caller, query, k=20, mode=mode)] for mode in ("hybrid", "dense")]
    shown += [
        tools.call("lookup_knowledge", caller, {"query": "What did Quillon Vance sign?"}),
        tools.call("document_context", caller, {"query_text": query}),
        tools.call("trace_connections", caller, {"query_text": "Nordhaven Logistics and "
                                                               "Quillon Vance"}),
        tools.call("search_entities", caller, {"query_text": "Secretmark"}),
        tools.call("search_entities", caller, {"query_text": "Nordhaven Logistics"}),
        tools.call("explore_topics", caller, {}),
        tools.call("explore_topics", caller, {"query_text": query}),
        tools.call("list_documents", caller, {"limit": 100}),
        tools.call("search", caller, {"query": query}),
    ]
    for hit in shown[-1].get("results", []):
        shown.append(tools.call("fetch", caller, {"id": hit["id"]}))
    governance = tools.governance
    shown.append([e.name for e in governance.entities(Caller(user), limit=200)])
    shown.append([c.title + " " + " ".join(c.members)
                  for c in governance.communities(Caller(user))])
    for part in shown:  # the caller's own words echoed back are not a leak
        if isinstance(part, dict):
            for key in ("query_text", "effective_query", "query", "unmatched_entities"):
                part.pop(key, None)
    return json.dumps(shown, ensure_ascii=False)


def _leaks(tools: DocgraphTools, user: str, hidden: dict[str, str]) -> list[str]:
    """The secret words (and documents) of ``hidden`` (word -> doc id) that ``user`` was
    shown, by any tool, or could read by id."""
    text = _outputs(tools, user)
    found = [word for word in hidden if word in text]
    for word, doc_id in hidden.items():
        try:
            page = tools.call("read_document", Caller(user), {"id": doc_id})
        except NotFound:
            continue
        found.append(f"{word} (read_document {doc_id}: {json.dumps(page)[:80]})")
    return found


def _corpus(seed: int) -> tuple[dict[str, str], dict[str, set[str] | None]]:
    """Files (path -> text) and each document's expected readers (None: everyone with the
    namespace), from one random assignment of permission sources."""
    rng = random.Random(seed)
    files: dict[str, str] = {}
    expected: dict[str, set[str] | None] = {}

    def pick() -> list[str]:
        return [*rng.sample(PRINCIPALS, rng.randint(0, 2)), "group:auditors"]

    folder_access = {f: (pick() if rng.random() < 0.6 else None) for f in FOLDERS}
    file_rules: dict[str, dict[str, list[str]]] = {f: {} for f in FOLDERS}
    for i in range(12):
        folder = FOLDERS[i % len(FOLDERS)]
        name = f"doc{i}.md"
        path = f"{folder}/{name}"
        body = f"# Note {i}\n\n{SHARED.format(n=i)} The codeword is {_word(i)}.\n"
        how = rng.choice(("inherit", "file", "front", "open-front"))
        readers: list[str] | None = folder_access[folder]
        if how == "file":
            readers = pick()
            file_rules[folder][name] = readers
        elif how == "front":
            readers = pick()
            body = f"---\naccess: {json.dumps(readers)}\n---\n{body}"
        files[path] = body
        expected[path] = None if readers is None else set(readers)
    for folder in FOLDERS:
        rules: dict[str, Any] = {}
        if folder_access[folder] is not None:
            rules["access"] = folder_access[folder]
        if file_rules[folder]:
            rules["files"] = file_rules[folder]
        if rules:
            files[f"{folder}/{SIDECAR}"] = json.dumps(rules)  # JSON is YAML
    files["open/readme.md"] = "# Readme\n\n" + SHARED.format(n=99) + " Open to all.\n"
    return files, expected


def _hidden_from(user: str, expected: dict[str, set[str] | None],
                 doc_ids: dict[str, str]) -> dict[str, str]:
    principals = _principals_of(user)
    return {_word(int(Path(p).stem[3:])): doc_ids[p] for p, readers in expected.items()
            if readers is not None and not readers & principals}


@settings(max_examples=3, phases=[Phase.generate], deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=10_000))
def test_no_tool_shows_a_document_its_caller_may_not_read(tmp_path_factory, make_graph,
                                                          seed):
    files, expected = _corpus(seed)
    folder = write_files(tmp_path_factory.mktemp("corpus"), files)
    graph = make_graph(f"access-{seed}.db")
    report = graph.index(folder, namespace="ops")
    assert not report.failed, report.failed
    graph.build_graph(["ops"])
    doc_ids = {d.path: d.doc_id for d in graph.store.documents_for_source(
        graph.store.list_sources()[0]).values()}
    tools = _governance(graph)

    for user in USERS:
        hidden = _hidden_from(user, expected, doc_ids)
        assert not _leaks(tools, user, hidden), f"{user} was shown what {sorted(hidden)} hold"
    dave = _outputs(tools, "dave")
    assert "Open to all" in dave or "Nordhaven" in dave  # the open text is still shown
    # carol reads everything: every word reachable, the stored reports whole
    carol = _outputs(tools, "carol")
    assert sum(_word(i) in carol for i in range(12)) >= 6, "carol must see the secrets"
    # the check is not vacuous: without the permission check someone is shown a secret
    with pytest.MonkeyPatch.context() as patch:  # this example only (hypothesis reruns)
        patch.setattr(Visibility, "may_read", lambda self, access: True)
        assert any(_leaks(tools, u, _hidden_from(u, expected, doc_ids))
                   for u in USERS if _hidden_from(u, expected, doc_ids)), \
            "with the permission check removed no leak was found: the test proves nothing"


def test_a_report_drawing_on_a_restricted_document_is_reassembled_for_others(
        tmp_path, make_graph):
    files = {f"open/n{i}.md": f"# N{i}\n\nNordhaven Logistics shipped pallets with Castellan "
                              f"Freight through dock {i}, Openmark{i}.\n" for i in range(30)}
    files["vault/plan.md"] = ("# Plan\n\nNordhaven Logistics, Castellan Freight and Quillon "
                              "Vance agreed on the Zephyrquartz codeword for the merger.\n")
    files[f"vault/{SIDECAR}"] = "access: [group:auditors]\n"
    graph = make_graph()
    graph.index(write_files(tmp_path / "c", files), namespace="ops")
    graph.build_graph(["ops"])
    tools = _governance(graph)
    carol = tools.call("explore_topics", Caller("carol"), {})
    assert any("Zephyrquartz" in r["text"] for r in carol["reports"]), \
        "the stored report must draw on the restricted document, or this proves nothing"
    for user in ("alice", "bob", "dave"):
        assert "Zephyrquartz" not in _outputs(tools, user)
    # a document made restricted after the graph was built is recorded by every community
    # its chunks feed at once (no rebuild), so those reports are guarded too
    shown = json.dumps(tools.call("explore_topics", Caller("alice"), {}))
    marks = [i for i in range(30) if f"Openmark{i}." in shown]
    assert marks, "some open passage must be in alice's reports for this to prove anything"
    doc = next(d for d in graph.store.documents_for_source(graph.store.list_sources()[0])
               .values() if d.path == f"open/n{marks[0]}.md")
    assert graph.store.set_document_access({doc.id: frozenset({"user:carol"})}) == 1
    communities = graph.graph_store.communities(["ops"])
    assert any(doc.doc_id in graph.graph_store.report_access_sources(c.id)
               for c in communities)
    assert f"Openmark{marks[0]}." not in json.dumps(
        tools.call("explore_topics", Caller("alice"), {}))
    assert f"Openmark{marks[0]}." in json.dumps(
        tools.call("explore_topics", Caller("carol"), {}))


def test_a_permission_change_at_the_source_is_picked_up_without_re_embedding(
        tmp_path, make_graph, embedder):
    folder = write_files(tmp_path / "c", {
        "team/plan.md": "# Plan\n\nThe Tern T3 codeword is Zephyrquartz.\n",
        "team/open.md": "# Open\n\nThe Tern T3 ships in May.\n",
        f"team/{SIDECAR}": "files:\n  plan.md: [group:finance]\n",
    })
    graph = make_graph()
    graph.index(folder, namespace="ops")
    tools = _governance(graph)

    def bob_sees() -> bool:
        hits = tools.governance.search(Caller("bob"), "Tern T3 codeword", k=5, mode="hybrid")
        return any("Zephyrquartz" in h.text for h in hits)

    assert not bob_sees()
    # the counts a caller is shown leave out what it may not read
    documents = {u: tools.call("index_status", Caller(u), {})["namespaces"][0]["documents"]
                 for u in ("alice", "bob")}
    assert documents == {"alice": 2, "bob": 1}
    (folder / "team" / SIDECAR).write_text("files:\n  plan.md: [group:finance, user:bob]\n")
    embedded = embedder.embedded
    report = graph.index(folder, namespace="ops")
    assert report.access_changed == 1 and report.unchanged == 2
    assert embedder.embedded == embedded and report.passages_embedded == 0  # none re-embedded
    assert bob_sees()
    # revoked again: gone for bob at the next build, still nothing embedded
    (folder / "team" / SIDECAR).write_text("access: [group:finance]\n")
    report = graph.index(folder, namespace="ops")
    assert report.access_changed == 2 and report.passages_embedded == 0
    assert not bob_sees()
    assert any("Zephyrquartz" in h.text for h in tools.governance.search(
        Caller("alice"), "Tern T3 codeword", k=5, mode="hybrid"))


def test_an_unreadable_permission_source_fails_closed_and_is_reported(tmp_path, make_graph):
    folder = write_files(tmp_path / "c", {
        "team/plan.md": "# Plan\n\nThe Tern T3 codeword is Zephyrquartz.\n",
        "team/memo.md": "---\naccess: [alice]\n---\n# Memo\n\nMarblewisp is the memo word.\n",
        "other/open.md": "# Open\n\nThe Tern T3 ships in May.\n",
    })
    graph = make_graph()
    report = graph.index(folder, namespace="ops")
    failed = dict(report.failed)
    assert "team/memo.md" in failed and "'alice' is not user:<id> or group:<name>" in \
        failed["team/memo.md"]
    # front matter that cannot be parsed but names access fails closed too
    broken = "---\naccess: [group:finance\n---\n# Broken\n\nQuartzmire is its word.\n"
    (folder / "team" / "broken.md").write_text(broken)
    report = graph.index(folder, namespace="ops")
    assert dict(report.failed)["team/broken.md"].startswith(
        "team/broken.md: front matter access: unreadable YAML")
    (folder / "team" / "broken.md").unlink()
    tools = _governance(graph)
    assert "Zephyrquartz" in json.dumps(tools.call(
        "search_documents", Caller("dave"), {"query_text": "Tern T3 codeword", "k": 5}))
    # a sidecar that cannot be parsed: its folder's files are withheld from everyone,
    # including those indexed before, and reported naming the sidecar; others are kept
    (folder / "team" / SIDECAR).write_text("access: [group:finance\n")
    report = graph.index(folder, namespace="ops")
    failed = dict(report.failed)
    assert failed["team/plan.md"].startswith(f"team/{SIDECAR}: unreadable YAML")
    for user in USERS:
        shown = json.dumps(tools.call("search_documents", Caller(user),
                                      {"query_text": "Tern T3 codeword", "k": 5}))
        assert "Zephyrquartz" not in shown and "ships in May" in shown
    # fixed: the document comes back for those the sidecar names
    (folder / "team" / SIDECAR).write_text("access: [group:finance]\n")
    graph.index(folder, namespace="ops")
    assert "Zephyrquartz" in json.dumps(tools.call(
        "search_documents", Caller("alice"), {"query_text": "Tern T3 codeword", "k": 5}))
    assert "Zephyrquartz" not in json.dumps(tools.call(
        "search_documents", Caller("dave"), {"query_text": "Tern T3 codeword", "k": 5}))


def _mail(sender: str, to: str, cc: str, body: str) -> bytes:
    from email.message import EmailMessage

    message = EmailMessage()
    message["From"], message["To"], message["Cc"] = sender, to, cc
    message["Subject"] = "Dock D-14 plan"
    message.set_content(body)
    message.add_attachment(b"The Zephyrquartz budget is 9,999 EUR.\n", maintype="text",
                           subtype="plain", filename="budget.txt")
    return bytes(message)


def test_a_mail_and_its_attachments_are_readable_by_its_participants_only(tmp_path,
                                                                          make_graph):
    folder = write_files(tmp_path / "mail", {
        "plan.eml": _mail("Alice <alice@example.com>", "Bob <Bob@Example.com>",
                          "carol@example.com", "The Marblewisp plan for dock D-14.\n"),
        "public.eml": _mail("ops@example.com", "all@example.com", "",
                            "The dock D-14 reopens on Monday.\n"),
        SIDECAR: "files:\n  public.eml: [group:ops]\n",  # a sidecar rule still wins
    })
    graph = make_graph(sources={"mail_participants": ["*"],
                                "principal_map": {"user:bob@example.com": "user:bob"}})
    graph.index(folder, namespace="ops")
    stored = {d.path: d.access for d in graph.store.documents_for_source(
        graph.store.list_sources()[0]).values()}
    participants = {"user:alice@example.com", "user:bob", "user:carol@example.com"}
    assert stored == {"plan.eml": participants, "plan.eml/budget.txt": participants,
                      "public.eml": {"group:ops"}, "public.eml/budget.txt": {"group:ops"}}
    tools = _governance(graph)
    for user, sees in (("bob", True), ("dave", False)):
        shown = " ".join(h.text for query in ("Marblewisp plan", "Zephyrquartz")
                         for h in tools.governance.search(Caller(user), query, k=10))
        assert ("Marblewisp" in shown, "Zephyrquartz budget" in shown) == (sees, sees), user
    report = graph.index(folder, namespace="ops")  # unchanged: the participants stand
    assert report.access_changed == 0 and report.unchanged == 2


def test_a_permissions_table_exported_from_elsewhere_names_documents_readers(
        tmp_path, make_graph, embedder):
    import sqlite3

    from docgraph.sources.urn import document_id, normalize_urn

    folder = write_files(tmp_path / "share", {
        "plan.md": "# Plan\n\nThe Tern T3 codeword is Zephyrquartz.\n",
        "memo.md": "# Memo\n\nMarblewisp is the memo word.\n",
        "open.md": "# Open\n\nThe Tern T3 ships in May.\n",
        "ruled.md": "# Ruled\n\nObsidianfjord is the ruled word.\n",
        SIDECAR: "files:\n  ruled.md: [group:ops]\n",  # a sidecar rule still wins
    })
    urn = normalize_urn(folder)
    acl = tmp_path / "acl.db"
    with sqlite3.connect(acl) as db:
        db.execute("CREATE TABLE document_permissions (document TEXT, principal TEXT)")
        db.executemany("INSERT INTO document_permissions VALUES (?, ?)", [
            (document_id(urn, "plan.md"), "user:alice"),
            (document_id(urn, "plan.md"), "group:finance"),
            (document_id(urn, "memo.md"), "bob"),  # not a principal: fails closed
            (document_id(urn, "ruled.md"), "user:alice"),
            ("file:///elsewhere/plan.md", "user:dave")])  # another folder's: not read
    graph = make_graph(sources={"permissions_table": {"url": f"sqlite:///{acl}"}})
    report = graph.index(folder, namespace="ops")
    assert dict(report.failed)["memo.md"] == (
        "memo.md: permissions table document_permissions: 'bob' is not user:<id> or "
        "group:<name>")

    def stored() -> dict[str, Any]:
        return {d.path: d.access for d in graph.store.documents_for_source(
            graph.store.list_sources()[0]).values()}

    assert stored() == {"plan.md": {"user:alice", "group:finance"}, "open.md": None,
                        "ruled.md": {"group:ops"}}
    # an exported change: stored at the next build, nothing embedded
    with sqlite3.connect(acl) as db:
        db.execute("DELETE FROM document_permissions WHERE principal = 'group:finance'")
    embedded = embedder.embedded
    report = graph.index(folder, namespace="ops")
    assert report.access_changed == 1 and embedder.embedded == embedded
    assert stored()["plan.md"] == {"user:alice"}
    # a table that cannot be read fails every document of the folder closed, named
    with sqlite3.connect(acl) as db:
        db.execute("DROP TABLE document_permissions")
    report = graph.index(folder, namespace="ops")
    assert {p for p, _ in report.failed} == {"plan.md", "memo.md", "open.md"}
    assert "permissions table document_permissions of sqlite:///" in dict(report.failed)[
        "open.md"]
    assert set(stored().values()) == {frozenset(), frozenset({"group:ops"})}


def test_the_permissions_table_comes_before_a_mails_participants(tmp_path, make_graph):
    # the documented order: front matter, sidecar, table, participants, tags/POSIX bits
    import sqlite3

    from docgraph.sources.urn import document_id, normalize_urn

    folder = write_files(tmp_path / "mail", {
        "plan.eml": _mail("alice@example.com", "bob@example.com", "", "Marblewisp.\n"),
        "memo.eml": _mail("alice@example.com", "carol@example.com", "", "Quartzmire.\n")})
    acl = tmp_path / "acl.db"
    with sqlite3.connect(acl) as db:
        db.execute("CREATE TABLE document_permissions (document TEXT, principal TEXT)")
        db.execute("INSERT INTO document_permissions VALUES (?, 'group:legal')",
                   (document_id(normalize_urn(folder), "plan.eml"),))
    graph = make_graph(sources={"mail_participants": ["*"],
                                "permissions_table": {"url": f"sqlite:///{acl}"}})
    graph.index(folder, namespace="ops")
    stored = {d.path: d.access for d in graph.store.documents_for_source(
        graph.store.list_sources()[0]).values() if "/" not in d.path}
    assert stored == {"plan.eml": {"group:legal"},
                      "memo.eml": {"user:alice@example.com", "user:carol@example.com"}}
    report = graph.index(folder, namespace="ops")  # unchanged: each keeps its set
    assert report.access_changed == 0 and report.unchanged == 2
