"""End to end with the real default model (all-MiniLM-L6-v2 int8) on the bundled corpus.

The sample corpus is indexed once per test session (~300 chunks; about 10-30 s on 2 cores).
Each example question of ``examples/QUERIES.md`` must find its answer's source document.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.governance import Caller, Governance, RoleAssignment, StaticEntitlements
from docgraph.serve.tools import DocgraphTools
from tests import store_backends
from tests.conftest import SAMPLE_CORPUS
from tests.example_queries import example_questions
from tests.pg import pgvector_server  # noqa: F401  (fixture of the postgres backend)
from tests.programs import (
    SAMPLE_SCAN,
    assert_sample_build_failures,
    needs_ocr,
    needs_ocr_for,
    sample_corpus_failures,
)

pytestmark = pytest.mark.e2e


def _questions() -> list[tuple[str, frozenset[str]]]:
    """The example questions answerable here: without OCR, not the one only the scan
    answers (the scan is then reported as a failed file, see ``real``)."""
    return [(q.question, q.sources) for q in example_questions()
            if not needs_ocr_for(q.sources)]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    settings = load_settings()
    settings.store.path = tmp_path_factory.mktemp("e2e") / "index.db"
    graph = DocGraph(settings)
    report = graph.index(SAMPLE_CORPUS, namespace="demo")
    assert_sample_build_failures(report.failed)
    yield graph, report
    graph.close()


def test_the_sample_corpus_indexes_completely(real):
    graph, report = real
    files = sum(1 for p in SAMPLE_CORPUS.rglob("*") if p.is_file())
    assert len(report.added) + len(report.failed) == files
    assert graph.catalog.embedding_model() == ("minilm-l6-int8", 384)
    stats = graph.status().namespaces[0]
    assert stats.chunks > 100 and stats.entities > 50 and stats.communities > 3


@pytest.mark.parametrize("mode", ["hybrid", "vector_first"])
def test_every_example_question_finds_its_source(real, mode):
    graph, _ = real
    questions = _questions()
    assert len(example_questions()) == 17
    misses = []
    for question, sources in questions:
        hits = graph.search(question, namespaces={"demo"}, k=5, mode=mode)
        if not sources & {h.source_path for h in hits}:
            misses.append((question, sources, [h.source_path for h in hits]))
    assert misses == []


def test_served_lookup_grades_exact_answers_and_flags_off_topic_questions(real):
    """Through the agent tool (governed cohort search, shipped thresholds): questions whose
    answer passage opens the evidence are PRECISE, no example question is flagged low
    quality (the Rotterdam one included: its summary or root cause first, with its page),
    and off-topic questions are WEAK."""
    graph, _ = real
    tools = DocgraphTools(Governance(
        graph, StaticEntitlements([RoleAssignment("agent", "reader", "demo")])))
    agent = Caller("agent")

    def lookup(query: str) -> dict[str, Any]:
        return tools.call("lookup_knowledge", agent, {"query": query})

    for question, source in (
        ("How many days a year may employees work from abroad?",
         "people/leave-and-hybrid-work-policy.md"),
        ("How often do robots exchange heartbeats with Roost, and what happens when they "
         "stop?", "engineering/roost-fleet-manager-architecture.docx"),
    ):
        exact = lookup(question)
        assert exact["evidence"][0]["source"] == source
        assert (exact["relevance_level"], exact["is_low_quality"]) == ("PRECISE", False)
    rotterdam = lookup("What caused the Rotterdam outage?")
    top = rotterdam["evidence"][0]
    assert top["source"] == "engineering/postmortem-inc-2025-007-rotterdam.pdf"
    # The PDF's outline gives its chunks sections, and each block says its page.
    assert top["section"].endswith(("> 1. Summary", "> 4. Root cause")), top["section"]
    assert top["pages"] in ([1], [2], [1, 2]) and rotterdam["is_low_quality"] is False
    hotel = next(e for e in lookup("What is the hotel cap per night in Rotterdam?")["evidence"]
                 if e["source"] == "people/travel-and-expense-policy.pdf")
    assert "Rotterdam EUR 165" in hotel["excerpt"] and hotel["pages"][0] == 1
    assert hotel["section"] == "Travel and Expense Policy > 3. Accommodation"
    flagged = [q for q, _ in _questions() if lookup(q)["is_low_quality"]]
    assert flagged == []
    for question in ("How do I bake sourdough bread?", "Who won the 1998 FIFA World Cup?"):
        off = lookup(question)
        assert (off["relevance_level"], off["is_low_quality"]) == ("WEAK", True), question


@needs_ocr
def test_the_scanned_page_and_the_mail_attachment_answer_as_documents_of_their_own(real):
    """Q17's answer is only in the image of a scanned page: the evidence comes from its OCR
    text, says so (``ocr: true``) and gives its page. Q16's is in the mailbox's attachment,
    cited as ``<mail>/<attachment>``."""
    graph, _ = real
    tools = DocgraphTools(Governance(
        graph, StaticEntitlements([RoleAssignment("agent", "reader", "demo")])))
    agent = Caller("agent")
    scan = SAMPLE_SCAN
    found = tools.call("lookup_knowledge", agent, {
        "query": "Which robot had its safety LiDAR scanner replaced at Nordhaven RTM-1 on "
                 "8 April 2025, and why?"})
    block = next(e for e in found["evidence"] if e["source"] == scan)
    assert block["ocr"] is True and block["pages"] == [1]
    assert "T3-051" in block["excerpt"]
    [document] = [d for d in graph.store.list_documents({"demo"}) if d.path == scan]
    assert document.metadata["ocr"] == "true"

    attachment = "support/brightwell-dock-audit.mbox/daventry-dock-audit-2025-03-31.csv"
    found = tools.call("lookup_knowledge", agent, {
        "query": "Which Daventry docks still had rev A contact springs in the 31 March audit, "
                 "and what are their serial numbers?"})
    block = next(e for e in found["evidence"] if e["source"] == attachment)
    assert "PLV2-0401" in block["excerpt"] or "PLV2-0433" in block["excerpt"]
    assert all("ocr" not in e for e in found["evidence"])


def test_exact_identifier_questions_rank_the_defining_document_first(real):
    graph, _ = real
    top = graph.search("What does error E-417 mean?", namespaces={"demo"}, k=3)
    assert {"engineering/error-code-reference.html", "support/tern-t3-faq.md"} & {
        h.source_path for h in top}
    hits = graph.search("CVE-2025-29174 workaround", namespaces={"demo"}, k=3)
    assert hits[0].source_path in {"engineering/security-advisory-hsa-2025-02.md",
                                   "engineering/tern-firmware-5.3.1-release-notes.md"}
    assert "engineering/security-advisory-hsa-2025-02.md" in {h.source_path for h in hits}


def test_unchanged_rerun_embeds_nothing_with_the_real_model(real):
    graph, _ = real
    report = graph.index(SAMPLE_CORPUS, namespace="demo")
    # a file that failed is read again (it may have become readable: OCR installed)
    assert report.chunks_embedded == 0 and report.bodies_read == len(sample_corpus_failures())
    assert graph.last_graph_reports == []


#: The CLI's index on the embedded file or on PostgreSQL (the CLI test runs on both).
backend = store_backends.product_backend


def test_cli_index_and_search_json(backend, tmp_path):
    store = backend.store_settings()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCGRAPH_STORE__")}
    cli = [sys.executable, "-m", "docgraph.serve.cli"]
    if store["backend"] == "postgres":
        env |= {"DOCGRAPH_STORE__BACKEND": "postgres", "DOCGRAPH_STORE__URL": str(store["url"])}
    else:
        cli += ["--index", str(store["path"])]
    done = subprocess.run([*cli, "index", str(SAMPLE_CORPUS / "people"), "-n", "hr"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    assert "added" in done.stdout
    found = subprocess.run([*cli, "search", "How many days may employees work from abroad?",
                            "-k", "2", "--json"], capture_output=True, text=True, timeout=300,
                           env=env)
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert hits[0]["source"] == "leave-and-hybrid-work-policy.md"
    assert hits[0]["score_label"] == "rrf" and hits[0]["namespace"] == "hr"
    bad = subprocess.run([*cli, "search", "x", "--mode", "nonsense"], capture_output=True,
                         text=True, timeout=300, env=env)
    assert bad.returncode == 1 and "mode: must be one of" in bad.stderr
