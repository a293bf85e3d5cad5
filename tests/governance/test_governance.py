"""Governance: entitlements, row re-check, routing, answers, audit; and a property test that
no output of any mode carries text the caller may not see."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from docgraph.errors import ConfigError, InvalidQuery
from docgraph.governance import (
    AccessDenied,
    CallableRowAuthorizer,
    Caller,
    Governance,
    PolicyFileEntitlements,
    RoleAssignment,
    SqlEntitlements,
    StaticEntitlements,
    principal_of,
    resolve_namespaces,
    route_namespaces,
)
from docgraph.governance.service import Answer
from tests import backend_graphs
from tests.governance_helpers import add_row_documents
from tests.helpers import write_files

# Every DocGraph test here runs on the embedded file and on PostgreSQL.
make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

GRANTS = StaticEntitlements([
    RoleAssignment("alice", "support", "support"),
    RoleAssignment("alice", "eng", "engineering"),
    RoleAssignment("bob", "support", "support"),
    RoleAssignment("root", "admin", "*"),
])

TICKETS = {
    "1": "Ticket 1: Nordhaven Logistics reports the Tern T3 fleet stopped with E-417.",
    "2": "Ticket 2: Brightwell Grocers asks about the Plover P2 dock invoice of 9,999 EUR.",
    "3": "Ticket 3: Castellan Pharma confidential escalation about the Heron H7 recall.",
    "4": "Ticket 4: Nordhaven Logistics thanks the team for restoring the Tern T3 fleet.",
}
# Which ticket rows each user may read in the source database.
ROW_RIGHTS = {"alice": {"1", "2", "3", "4"}, "bob": {"1", "4"}, "root": {"1", "2", "3", "4"}}


def _rights(caller, key, pks):
    return {pk for pk in pks if pk in ROW_RIGHTS.get(caller.user_id, set())}


@pytest.fixture
def governed(tmp_path, make_graph):
    graph = make_graph()
    graph.index(write_files(tmp_path / "eng", {
        "firmware.md": "# Firmware\n\nTern T3 firmware 5.3.1 fixes E-417 for Nordhaven "
                       "Logistics.\n",
    }), namespace="engineering")
    graph.index(write_files(tmp_path / "sup", {
        "sla.md": "# SLA\n\nPlatinum customers such as Nordhaven Logistics get a 15 minute "
                  "P1 response.\n",
    }), namespace="support")
    add_row_documents(graph, "support", "tickets", TICKETS)
    return Governance(graph, GRANTS, CallableRowAuthorizer(_rights))


def test_namespaces_follow_roles_and_expand_the_wildcard(governed):
    assert governed.namespaces(Caller("alice")) == {"support", "engineering"}
    assert governed.namespaces(Caller("alice", "eng")) == {"engineering"}
    assert governed.namespaces(Caller("root")) == {"support", "engineering"}


def test_wildcard_is_expanded_at_request_time(tmp_path, governed):
    governed.root.index(write_files(tmp_path / "hr", {"a.md": "# HR\n\nleave\n"}),
                         namespace="hr")
    assert "hr" in governed.namespaces(Caller("root"))
    assert "hr" not in governed.namespaces(Caller("alice"))


def test_empty_entitlement_is_a_denial_never_everything(governed):
    with pytest.raises(AccessDenied, match="mallory"):
        governed.search(Caller("mallory"), "Nordhaven")
    with pytest.raises(AccessDenied):
        resolve_namespaces(Caller("mallory"), GRANTS, ["support", "engineering"])
    assert governed.audit.recent(1)[0]["outcome"] == "denied"


def test_a_role_the_caller_does_not_hold_is_refused(governed):
    with pytest.raises(AccessDenied, match="does not hold role 'admin'"):
        governed.search(Caller("bob", active_role="admin"), "Nordhaven")


def test_row_rechecks_hide_rows_per_caller(governed):
    alice = {h.doc_id for h in governed.search(Caller("alice"), "ticket escalation", k=10)}
    bob = {h.doc_id for h in governed.search(Caller("bob"), "ticket escalation", k=10)}
    assert "public.tickets.body/3" in alice
    assert "public.tickets.body/3" not in bob and "public.tickets.body/2" not in bob
    assert "public.tickets.body/1" in bob


def test_over_fetch_refills_to_k_when_enough_visible_chunks_exist(governed):
    # bob sees three chunks in "support": the SLA and tickets 1 and 4. With no over-fetch
    # the first round (3 hits) also holds tickets 2/3, so k=3 needs a refill round.
    governed.overfetch = 1
    hits = governed.search(Caller("bob"), "Ticket Brightwell Castellan", k=3)
    assert len(hits) == 3
    assert [h.original_rank for h in hits] == [1, 2, 3]
    assert governed.audit.recent(1)[0]["row_drops"] >= 1
    assert all(h.doc_id not in {"public.tickets.body/2", "public.tickets.body/3"} for h in hits)


def test_authorizer_failure_fails_closed_and_is_audited(governed):
    def broken(caller, key, pks):
        raise RuntimeError("gateway down")

    governed.row_authorizer = CallableRowAuthorizer(broken)
    hits = governed.search(Caller("alice"), "Ticket Nordhaven", k=10)
    assert hits and all(h.origin is None for h in hits)
    record = governed.audit.recent(1)[0]
    assert any("gateway down" in f for f in record["authorizer_failures"])
    assert record["row_drops"] > 0


def test_no_authorizer_denies_row_documents(governed):
    governed.row_authorizer = None
    hits = governed.search(Caller("alice"), "Ticket", k=10)
    assert all(h.origin is None for h in hits)


def test_router_can_only_narrow(governed):
    class Router:
        name = "router"

        def __init__(self, reply):
            self.reply, self.prompts = reply, []

        def complete(self, prompt, max_tokens=400):
            self.prompts.append(prompt)
            if isinstance(self.reply, Exception):
                raise self.reply
            return self.reply

    entitled = frozenset({"support", "engineering"})
    descriptions = {"support": "tickets", "engineering": "firmware", "finance": "money"}
    widening = Router("finance, engineering, board")
    assert route_namespaces("q", entitled, descriptions, widening) == {"engineering"}
    assert "finance" not in widening.prompts[0]  # the router never sees other namespaces
    assert route_namespaces("q", entitled, descriptions, Router("finance")) == entitled
    assert route_namespaces("q", entitled, descriptions, Router(RuntimeError("x"))) == entitled
    governed.router = Router("engineering")
    hits = governed.search(Caller("alice"), "Nordhaven Logistics Tern T3", k=10)
    assert hits and {h.namespace for h in hits} == {"engineering"}


def test_answer_cites_only_visible_blocks_and_is_redacted(governed):
    class Writer:
        name = "writer"

        def complete(self, prompt, max_tokens=400):
            count = len(re.findall(r"^\[\d+\]", prompt, flags=re.M))
            return f"See [1] and [{count + 5}]."

    governed.chat_model = Writer()
    governed.redactor = lambda a: Answer(a.text.replace("See", "Read"), a.citations, a.blocks)
    answer = governed.answer(Caller("bob"), "Nordhaven ticket")
    assert answer.text.startswith("Read [1] and")
    assert re.findall(r"\[(\d+)\]", answer.text) == ["1"]
    assert answer.citations == [answer.blocks[0].chunk_id]
    assert all(b.doc_id not in {"public.tickets.body/2", "public.tickets.body/3"}
               for b in answer.blocks)
    governed.chat_model = None
    with pytest.raises(ConfigError):
        governed.answer(Caller("bob"), "x")


def test_policy_file_entitlements(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("assignments:\n  - {user: alice, role: support, domain: support}\n")
    policy = PolicyFileEntitlements(path)
    assert resolve_namespaces(Caller("alice"), policy, ["support"]) == {"support"}
    path.write_text("assignments:\n  - {user: alice, role: eng, domain: '*'}\n")
    import os
    os.utime(path, (1, 2_000_000_000))
    assert resolve_namespaces(Caller("alice"), policy, ["a", "b"]) == {"a", "b"}
    path.write_text("assignments: [{user: alice}]\n")
    os.utime(path, (1, 2_000_000_001))
    with pytest.raises(ConfigError, match=r"policy\.yaml"):
        policy.assignments_for("alice")


def test_policy_file_grants_to_groups_its_members_and_vouched_groups(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(
        "groups:\n  finance: [alice, carol]\n  ops: [dave]\n"
        "assignments:\n"
        "  - {user: alice, role: support, domain: support}\n"
        "  - {group: finance, role: analyst, domain: finance}\n"
        "  - {group: ops, role: admin, domain: '*'}\n")
    policy = PolicyFileEntitlements(path)
    known = ["finance", "support", "ops"]
    # a member by the policy holds the group's grants with its own
    assert resolve_namespaces(Caller("alice"), policy, known) == {"support", "finance"}
    assert resolve_namespaces(Caller("carol"), policy, known) == {"finance"}
    assert policy.groups_of("carol") == {"finance"} and policy.groups_of("bob") == set()
    # a non-member holds nothing of it; the same user vouched for as a member (an identity
    # provider's groups claim) does
    with pytest.raises(AccessDenied, match="'bob' has no domain"):
        resolve_namespaces(Caller("bob"), policy, known)
    assert resolve_namespaces(Caller("bob", groups=frozenset({"finance"})), policy,
                              known) == {"finance"}
    # a group's role can be the active one; a role of no group of the caller's cannot
    assert resolve_namespaces(Caller("alice", "analyst"), policy, known) == {"finance"}
    with pytest.raises(AccessDenied, match="does not hold role 'admin'"):
        resolve_namespaces(Caller("alice", "admin"), policy, known)
    assert resolve_namespaces(Caller("dave"), policy, known) == set(known)
    # the principal names the user and each group
    principal = principal_of(Caller("alice", groups=frozenset({"eu"})), policy)
    assert principal.principals == {"user:alice", "group:eu", "group:finance"}


@pytest.mark.parametrize("text, named", [
    ("assignments:\n  - {user: a, group: g, role: r, domain: d}\n", "assignment 1"),
    ("assignments:\n  - {role: r, domain: d}\n", "assignment 1"),
    ("assignments:\n  - {user: a, role: r, domain: d}\n  - nonsense\n", "assignment 2"),
    ("groups:\n  finance: alice\n", "groups"),
    ("- just a list\n", "expected a mapping"),
])
def test_a_bad_policy_entry_is_refused_naming_the_file_and_entry(tmp_path, text, named):
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"policy\.yaml.*{named}|{named}.*policy\.yaml"):
        PolicyFileEntitlements(path).assignments_for("a")


def test_governed_requests_are_decided_and_audited_for_the_callers_groups(governed):
    governed.entitlements = StaticEntitlements(
        [*GRANTS.assignments_for("alice"), RoleAssignment("", "eng", "engineering", "eng")],
        members={"eng": ["carol"]})
    hits = governed.search(Caller("carol"), "firmware E-417", k=3)
    assert hits and {h.namespace for h in hits} == {"engineering"}
    record = governed.audit.recent(1)[0]
    assert (record["user_id"], record["groups"], record["namespaces"]) == (
        "carol", ["eng"], ["engineering"])
    with pytest.raises(AccessDenied):
        governed.search(Caller("dave"), "firmware E-417", k=3)
    # a group the authenticator vouches for counts like a declared one
    assert governed.search(Caller("dave", groups=frozenset({"eng"})), "firmware", k=3)


def test_a_caller_group_must_be_a_name():
    with pytest.raises(AccessDenied, match="groups must be non-empty names"):
        Caller("alice", groups=frozenset({" "}))


def test_sql_entitlements_bind_the_user_id(tmp_path):
    import sqlalchemy as sa

    url = f"sqlite:///{tmp_path / 'auth.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE user_role_assignments (user_id, role, domain)")
        conn.exec_driver_sql("INSERT INTO user_role_assignments VALUES "
                             "('alice', 'support', 'support'), ('x'' OR ''1''=''1', 'r', 'd')")
    grants = SqlEntitlements(url)
    assert resolve_namespaces(Caller("alice"), grants, []) == {"support"}
    with pytest.raises(AccessDenied):
        resolve_namespaces(Caller("' OR '1'='1"), grants, ["support"])


def test_sql_entitlements_grant_to_groups_named_in_the_user_column(tmp_path):
    import sqlalchemy as sa

    url = f"sqlite:///{tmp_path / 'auth.db'}"
    with sa.create_engine(url).begin() as conn:
        conn.exec_driver_sql("CREATE TABLE user_role_assignments (user_id, role, domain)")
        conn.exec_driver_sql("INSERT INTO user_role_assignments VALUES "
                             "('alice', 'support', 'support'),"
                             " ('group:finance', 'analyst', 'finance'),"
                             " ('group:x'' OR ''1''=''1', 'r', 'd')")
    grants = SqlEntitlements(url)
    alice = Caller("alice", groups=frozenset({"finance"}))
    assert resolve_namespaces(alice, grants, []) == {"support", "finance"}
    assert [a.group for a in grants.assignments_for("alice", frozenset({"finance"}))
            if a.group] == ["finance"]
    assert resolve_namespaces(Caller("alice"), grants, []) == {"support"}
    # a group name is bound, never SQL: it matches the row of that exact name only
    assert resolve_namespaces(Caller("bob", groups=frozenset({"x' OR '1'='1"})), grants,
                              []) == {"d"}


def test_context_and_global_reports_show_only_visible_rows(governed):
    # "Castellan Pharma" and the "9,999 EUR" invoice exist only in rows bob may not read.
    for mode in ("vector_first", "graph_first", "global"):
        result = governed.retrieve(Caller("bob"), "Castellan Pharma Heron recall invoice",
                                   k=10, mode=mode, return_trace=True)
        texts = " ".join(h.text for h in result.hits)
        assert "Castellan" not in texts and "9,999" not in texts, mode
        trace_ids = {c for lane in result.trace.candidates.values() for c in lane}
        assert not any(c.startswith(("public.tickets.body/2#", "public.tickets.body/3#"))
                       for c in trace_ids), mode
    context = governed.context(Caller("bob"), "Castellan Pharma Heron recall", token_budget=3000)
    assert "Castellan" not in context.text and "9,999" not in context.text
    alice = governed.context(Caller("alice"), "Castellan Pharma Heron recall",
                             token_budget=3000)
    assert "Castellan" in alice.text


def test_search_api_takes_no_namespace_from_the_caller(governed):
    with pytest.raises(TypeError):
        governed.search(Caller("bob"), "x", namespaces={"engineering"})  # type: ignore[call-arg]


# -- property: nothing outside the caller's rights, in any mode ----------------------------

WORDS = ["Nordhaven", "Tern", "firmware", "ticket", "recall", "invoice", "Heron", "dock",
         "Castellan", "escalation", "fleet", "E-417", "SLA", "Plover"]


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(
    docs=st.lists(
        st.tuples(st.sampled_from(["alpha", "beta", "gamma"]),
                  st.lists(st.sampled_from(WORDS), min_size=3, max_size=8),
                  st.booleans()),
        min_size=3, max_size=8,
    ),
    grants=st.dictionaries(st.sampled_from(["u1", "u2"]),
                           st.sets(st.sampled_from(["alpha", "beta", "gamma"]), min_size=1),
                           min_size=2, max_size=2),
    rights=st.dictionaries(st.sampled_from(["u1", "u2"]),
                           st.sets(st.integers(0, 7).map(str)), min_size=2, max_size=2),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
    mode=st.sampled_from(["vector_first", "graph_first", "global"]),
)
# With the personalized-PageRank lane off and on: its walk must stay inside
# the caller's namespaces like every other lane.
@pytest.mark.parametrize("ppr_lane", [False, True], ids=["ppr_off", "ppr_on"])
def test_no_output_leaks_across_namespaces_or_rows(tmp_path_factory, make_graph, ppr_lane,
                                                   docs, grants, rights, query, mode):
    graph = make_graph(f"{tmp_path_factory.mktemp('prop').name}.db")
    graph.cohort_settings = replace(graph.cohort_settings, ppr_lane=ppr_lane)
    owner: dict[str, tuple[str, bool, str]] = {}  # marker -> (namespace, is_row, pk)
    for i, (ns, words, is_row) in enumerate(docs):
        marker = f"zq{i}x"
        text = f"{' '.join(words)} {marker}. {' '.join(reversed(words))}."
        owner[marker] = (ns, is_row, str(i))
        if is_row:
            add_row_documents(graph, ns, f"t{ns}", {str(i): text})
        else:
            folder = tmp_path_factory.mktemp(f"d{i}")
            (folder / f"doc{i}.md").write_text(f"# Doc {i}\n\n{text}\n")
            graph.index(folder, namespace=ns)
    entitlements = StaticEntitlements(
        [RoleAssignment(u, "r", d) for u, domains in grants.items() for d in domains])
    governance = Governance(graph, entitlements,
                            CallableRowAuthorizer(lambda c, k, pks: set(pks) & rights[c.user_id]))

    def allowed(user: str, marker: str) -> bool:
        ns, is_row, pk = owner[marker]
        return ns in grants[user] and (not is_row or pk in rights[user])

    for user in grants:
        caller = Caller(user)
        try:
            result = governance.retrieve(caller, query, k=5, mode=mode, return_trace=True)
        except InvalidQuery:
            continue
        outputs = [h.text for h in result.hits]
        trace_ids = [c for lane in result.trace.candidates.values() for c in lane]
        trace_ids += list(result.trace.final_provenance)
        for chunk_id in trace_ids:  # ids name their document: body/<i> or doc<i>.md
            found = re.search(r"(?:body/|doc)(\d+)(?:\.md)?#chunk-", chunk_id)
            if found:
                assert allowed(user, f"zq{found.group(1)}x"), (user, chunk_id, mode)
        context = governance.context(caller, query, token_budget=1500)
        outputs.append(context.text)
        for text in outputs:
            for marker in re.findall(r"zq\d+x", text):
                assert allowed(user, marker), (user, marker, mode)
        for hit in result.hits:
            assert hit.namespace in grants[user]
