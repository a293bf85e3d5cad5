"""The judging of ``bench/agent_loop.py`` on small indexes (deterministic embedder): its
loops, its "what was read" rules and the example questions' gold annotations."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLE_CORPUS
from tests.example_queries import example_questions
from tests.helpers import write_files
from tests.programs import needs_ocr_for

sys.path.insert(0, str(REPO / "bench"))
import agent_loop


def _count(texts: list[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def test_every_example_question_is_answered_by_its_gold_files_read_whole(make_graph):
    graph = make_graph()
    graph.index(SAMPLE_CORPUS, namespace=agent_loop.SAMPLE_NAMESPACE)
    tools = agent_loop.make_tools(graph, agent_loop.SAMPLE_NAMESPACE)
    name = agent_loop.source_name(tools)
    questions = example_questions()
    assert len(questions) == 17 and [len(q.hops) for q in questions].count(2) == 2
    questions = [q for q in questions if not needs_ocr_for(q.sources)]  # the scan's, without OCR
    texts = {p: agent_loop.read_whole(tools, f"{name}/{p}")
             for q in questions for p in q.sources}
    for q in questions:
        everything = "".join(texts[p] for p in sorted(q.sources))
        assert agent_loop.sample_found(q, q.sources, everything) == {
            "file": True, "answer": True}, q.number
        # one hop's files alone do not answer a two-hop question
        for hop in q.hops if len(q.hops) > 1 else ():
            assert not agent_loop.sample_found(q, hop, everything)["file"]
            assert not agent_loop.sample_found(q, hop, texts[min(hop)])["answer"]


FILLER = ("The yard crew logs pallets, checks the dock doors and sweeps the aisles before "
          "the morning shift starts. ")


@pytest.fixture
def small_tools(tmp_path: Path, make_graph):
    filler = FILLER * 3
    files = {  # one section of two chunks; the answer ends the first, past its snippet
        "kestrel.md": "# Kestrel K9 tug\n\n## Charging\n\n"
                      f"The Kestrel K9 tug charges at bay 7. {filler}"
                      "The Kestrel K9 tug battery swap takes eleven minutes flat.\n\n"
                      f"The Kestrel K9 tug also parks at bay 7 overnight. {filler}\n",
        "heron.md": "# Heron notes\n\nThe Kestrel K9 tug is older than the Heron H7 mover. "
                    f"{FILLER}\n",
        "other.md": f"# Canteen\n\nLunch is served from noon. {FILLER}\n",
    }
    graph = make_graph(loader={"chunk_tokens": 120})
    graph.index(write_files(tmp_path / "yard", files), namespace="ops")
    return agent_loop.make_tools(graph, "ops")


def test_a_snippet_shows_the_file_and_the_fetch_reads_the_answer(small_tools):
    question = "How long does the Kestrel K9 tug battery swap take?"
    done = agent_loop.run_loop(small_tools, agent_loop.AGENT, "search_fetch", question, _count)
    assert [c.tool for c in done] == ["search", "fetch", "fetch"]
    first = agent_loop.read_after(done, 1)
    assert done[1].argument.endswith("kestrel.md#chunk-0") and "kestrel.md" in first[0]
    assert not agent_loop.contains(first[1], "battery swap takes eleven minutes flat")
    _, read, tokens = agent_loop.read_after(done, 3)
    assert agent_loop.contains(read, "battery swap takes eleven minutes flat")
    assert tokens == sum(c.tokens for c in done) > agent_loop.read_after(done, 1)[2] > 0
    # the third call never re-reads a chunk the second one returned whole
    fetched = small_tools.call("fetch", agent_loop.AGENT, {"id": done[1].argument})
    assert done[2].argument not in fetched["metadata"]["chunk_ids"]


def test_every_loop_reads_each_unread_candidate_once_then_stops(small_tools):
    question = "Kestrel K9 tug bay 7"
    for loop, (first, _) in agent_loop.LOOPS.items():
        args = {"query_text" if first == "search_documents" else "query": question}
        offered = agent_loop.candidate_ids(first, small_tools.call(first, agent_loop.AGENT,
                                                                   args))
        assert offered[0] == "yard/kestrel.md#chunk-0" and "yard/kestrel.md#chunk-1" in offered
        done = agent_loop.run_loop(small_tools, agent_loop.AGENT, loop, question, _count,
                                   calls=10)
        # chunk-1 came whole with chunk-0's section, so it is never opened on its own
        assert [c.argument for c in done[1:]] == [
            i for i in offered if i != "yard/kestrel.md#chunk-1"], loop


def test_passages_count_as_read_only_whole_and_shown_by_file():
    gold = {"w1.md": "Teutberga( died 11 November 875) was a queen of Lotharingia.",
            "w2.md": "Lothair II was a king."}
    read = agent_loop.words("… teutberga (died 11 November 875) was a QUEEN of Lotharingia …"
                            " Lothair II was a")
    assert agent_loop.passages_found(gold, frozenset({"w2.md"}), read) == {
        "read_any": True, "read_all": False, "shown_any": True, "shown_all": False}
    assert not agent_loop.contains(agent_loop.words("a 1860 price"), "186")
    assert agent_loop.contains(agent_loop.words("unit_price_eur: 186.00"), "186")
    # the question an answer echoes is not something read
    echo = {"query": "Lothair II was a king.", "evidence": []}
    assert not agent_loop.contains(agent_loop.reading("lookup_knowledge", echo), "a king")
    # pieces of one answer (or of two calls) are never joined into one phrase
    two = agent_loop.words("Lothair II was") + agent_loop.words("a king.")
    assert not agent_loop.passages_found(gold, frozenset(), two)["read_any"]


def test_a_read_page_is_one_text_across_its_chunks(small_tools):
    page = small_tools.call("read_document", agent_loop.AGENT, {"id": "yard/kestrel.md#chunk-0"})
    assert [c["index"] for c in page["chunks"]] == [0, 1]
    across = "takes eleven minutes flat. The Kestrel K9 tug also parks"
    assert agent_loop.contains(agent_loop.reading("read_document", page), across)
    assert not agent_loop.contains(agent_loop.reading("search_documents", {"results": [
        {"source": "kestrel.md", "text": c["text"]} for c in page["chunks"]]}), across)
