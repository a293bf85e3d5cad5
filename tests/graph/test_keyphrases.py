"""Key phrases: entities from a namespace's statistics, whatever the letter case.

The corpus here is written entirely in lower case, so the vocabulary, pattern and
proper-name extractors find nothing in it: every entity, edge and community below comes
from the key-phrase extractor (the ``keyphrases = false`` control shows it).
"""

from __future__ import annotations

import pytest

from docgraph.config import GraphSettings
from docgraph.errors import ConfigError
from docgraph.graph.build import make_extractor
from docgraph.graph.keyphrases import (
    KeyphraseParams,
    Vocabulary,
    choose_keyphrases,
    phrase_matcher,
    select_keyphrases,
)
from docgraph.graph.normalize import canonical_key
from docgraph.model import EntityLink
from tests import backend_graphs
from tests.helpers import write_files

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

TOPICS = [
    ("insulin resistance", "pancreatic beta cells", "metformin"),
    ("heart failure", "ejection fraction", "diuretics"),
    ("malaria parasites", "bed nets", "artemisinin"),
    ("amyloid plaques", "tau tangles", "dementia"),
]
# Small corpora: a phrase in 6 of 24 chunks is a fair topic, not a hub.
GRAPH = {"keyphrase_max_chunk_share": 0.5}
PARAMS = KeyphraseParams(max_chunk_share=0.5)


VERBS = ["changed", "rose", "fell", "improved", "worsened", "varied"]
GROUPS = ["people", "adults", "patients", "volunteers", "women", "men"]


def lower_case_doc(topic: int, j: int) -> str:
    """One lower-case note about ``TOPICS[topic]`` (its ``j``-th); the everyday words vary
    from note to note, as in real text."""
    a, b, c = TOPICS[topic]
    verb, group = VERBS[(j + topic) % 6], GROUPS[(2 * j + topic) % 6]
    return (f"we looked at {a} in {20 + j} {group} over {j + 2} years. {a} went with {b} and "
            f"{c} in most of them. when {b} {verb}, {a} {VERBS[(j + 3) % 6]} too, and {c} was "
            "given to some of them.\n")


def corpus(docs: range = range(6)) -> dict[str, str]:
    """Files of ``docs`` notes per topic."""
    return {f"t{t}_{j}.txt": lower_case_doc(t, j) for t in range(len(TOPICS)) for j in docs}


def test_specific_terms_and_collocations_are_chosen_not_common_words():
    phrases = select_keyphrases(corpus().values(), PARAMS)
    keys = {p.key for p in phrases}
    assert {"insulin resistance", "heart failure", "ejection fraction", "tau tangle",
            "amyloid plaque", "metformin", "artemisinin"} <= keys
    common = {"people", "patient", "year", "looked", "most", "some", "given", "went", *VERBS}
    assert not any(set(k.split()) & common for k in keys), keys
    assert not any(k.split()[0] in {"we", "the", "in", "and", "when"} for k in keys)
    by_key = {p.key: p for p in phrases}
    assert by_key["heart failure"].chunks == 6
    assert by_key["tau tangle"].surfaces == ("tau tangles",)


def test_selection_depends_on_the_texts_only_not_their_order():
    texts = list(corpus().values())
    assert select_keyphrases(texts, PARAMS) == select_keyphrases(texts[::-1], PARAMS)


def test_a_phrase_needs_min_chunks_and_at_most_the_chunk_share():
    two_each = list(corpus(range(2)).values())
    assert select_keyphrases(two_each, PARAMS) == []  # 2 chunks < keyphrase_min_chunks 3
    everywhere = [f"heart failure and ejection fraction, case {i}." for i in range(10)]
    assert select_keyphrases(everywhere, PARAMS) == []  # in every chunk: a hub, not a topic


def test_phrases_match_case_insensitively_under_their_canonical_key():
    matcher = phrase_matcher(select_keyphrases(corpus().values(), PARAMS))
    found = {(m.text, m.key) for m in matcher.find("Heart Failure with Tau Tangles")}
    assert found == {("Heart Failure", "heart failure"), ("Tau Tangles", "tau tangle")}


def test_a_chunk_keeps_its_highest_tf_idf_phrases_and_every_other_entity():
    phrases = select_keyphrases(corpus().values(), PARAMS)
    weights = {p.key: 1.0 for p in phrases} | {"metformin": 3.0}
    extractor = make_extractor(GraphSettings(keyphrase_max_per_chunk=2)).with_phrases(
        phrase_matcher(phrases), weights)
    text = ("Mei Tanaka saw heart failure, heart failure again, tau tangles, bed nets and "
            "metformin at Nordhaven Logistics.")
    by_type: dict[str, set[str]] = {}
    for link in extractor.links(text):
        by_type.setdefault(link.type, set()).add(link.key)
    # heart failure: 2 mentions x 1.0; metformin: 1 x 3.0; the others 1 x 1.0 are dropped.
    assert by_type["phrase"] == {"heart failure", "metformin"}
    assert by_type["name"] == {"mei tanaka", "nordhaven logistic"}
    uncapped = make_extractor(GraphSettings(keyphrase_max_per_chunk=10)).with_phrases(
        phrase_matcher(phrases), weights)
    assert {"tau tangle", "bed net"} <= {link.key for link in uncapped.links(text)}


def test_unknown_language_is_a_config_error():
    with pytest.raises(ConfigError, match="keyphrase_language"):
        make_extractor(GraphSettings(keyphrase_language="xx-nowhere"))
    assert make_extractor(GraphSettings(keyphrases=False)).keyphrases is None


def test_lower_case_corpus_gets_entities_edges_communities_and_global_answers(
        tmp_path, make_graph):
    folder = write_files(tmp_path / "notes", corpus())
    on = make_graph("on.db", graph=GRAPH)
    on.index(folder, namespace="med")
    report = on.last_graph_reports[0]
    assert report.keyphrases >= 12 and report.entities >= 12 and report.edges > 0
    assert {"heart failure", "ejection fraction"} <= {e.key for e in on.entities({"med"})}
    neighbours = {n.entity.key for n in on.neighbors("heart failure", {"med"})}
    assert "ejection fraction" in neighbours and "insulin resistance" not in neighbours
    assert on.communities({"med"})
    assert on.search("what are the main themes?", namespaces={"med"}, k=3, mode="global")

    off = make_graph("off.db", graph={**GRAPH, "keyphrases": False})
    off.index(folder, namespace="med")
    assert off.entities({"med"}) == [] and off.communities({"med"}) == []
    assert off.search("what are the main themes?", namespaces={"med"}, k=3,
                      mode="global") == []


def test_phrases_of_one_namespace_never_link_another(tmp_path, make_graph):
    graph = make_graph(graph=GRAPH)
    graph.index(write_files(tmp_path / "med", corpus()), namespace="med")
    # "heart failure" twice here: below keyphrase_min_chunks in this namespace.
    other = {f"n{i}.txt": f"the shop sold {i} bikes on monday and tuesday.\n" for i in range(6)}
    other["n0.txt"] += "heart failure was on the radio.\n"
    other["n1.txt"] += "a film about heart failure.\n"
    graph.index(write_files(tmp_path / "misc", other), namespace="misc")
    misc_keys = {e.key for e in graph.entities({"misc"}, limit=500)}
    assert "heart failure" not in misc_keys
    med = graph.entities({"med"}, limit=500)
    assert "heart failure" in {e.key for e in med}
    linked = graph.graph_store.chunks_for_entities([e.id for e in med], per_entity=100)
    texts = graph.store.chunks_by_rowid([rowid for _, rowid, _, _ in linked])
    assert texts and {c.namespace for c in texts.values()} == {"med"}


def state(graph):  # type: ignore[no-untyped-def]
    """Entities, edges and communities of namespace ``med``, independent of row ids."""
    store = graph.graph_store
    entities = {e.key: (e.name, e.type, e.chunk_count)
                for e in graph.entities({"med"}, limit=500)}
    return entities, store.edge_signature("med"), store.community_signature("med")


def test_incremental_build_equals_a_fresh_build(tmp_path, make_graph):
    folder = write_files(tmp_path / "notes", corpus(range(2)))
    incremental = make_graph("incremental.db", graph=GRAPH)
    incremental.index(folder, namespace="med")
    assert incremental.entities({"med"}) == []  # two notes a topic: no phrase yet
    added = {k: v for k, v in corpus().items() if k not in corpus(range(2))}
    write_files(folder, added)
    incremental.index(folder, namespace="med")
    report = incremental.last_graph_reports[0]
    # The new phrases are also found in the chunks written before they existed ...
    assert report.relinked_chunks == len(corpus())
    # ... but only the new chunks were tokenized and run through the base extractors.
    assert report.extracted_chunks == len(added)
    fresh = make_graph("fresh.db", graph=GRAPH)
    fresh.index(folder, namespace="med")

    assert state(incremental) == state(fresh)
    assert state(fresh)[0]
    # A build with nothing changed extracts, matches and rewrites nothing.
    report = incremental.build_graph(["med"])[0]
    assert (report.relinked_chunks, report.extracted_chunks, report.matched_chunks) == (0, 0, 0)
    assert state(incremental) == state(fresh)


def test_changes_and_deletions_relink_what_they_touch_and_equal_a_fresh_build(
        tmp_path, make_graph):
    folder = write_files(tmp_path / "notes", corpus(range(8)))
    graph = make_graph("incremental.db", graph=GRAPH)
    graph.index(folder, namespace="med")
    # Malaria drops to 2 notes (below keyphrase_min_chunks): its phrases must go from the
    # notes that remain; one heart-failure note changes wording.
    for j in range(2, 8):
        (folder / f"t2_{j}.txt").unlink()
    changed = lower_case_doc(1, 0).replace("diuretics", "diuretics and salt")
    write_files(folder, {"t1_0.txt": changed})
    graph.index(folder, namespace="med")
    report = graph.last_graph_reports[0]
    assert report.extracted_chunks == 1  # the changed note only
    # Matched again: the changed note and the notes holding a phrase chosen or dropped (the
    # two malaria notes at least), not the whole namespace.
    assert 3 <= report.matched_chunks < len(corpus(range(8))) - 6
    assert not {e.key for e in graph.entities({"med"}, limit=500)} & {
        "malaria parasite", "bed net", "artemisinin"}
    fresh = make_graph("fresh.db", graph=GRAPH)
    fresh.index(folder, namespace="med")
    assert state(graph) == state(fresh)
    # A new process (nothing kept in memory) builds the same graph again.
    reopened = make_graph("incremental.db", graph=GRAPH)
    report = reopened.build_graph(["med"])[0]
    assert report.extracted_chunks == len(corpus(range(8))) - 6 and report.relinked_chunks == 0
    assert state(reopened) == state(fresh)


def test_turning_key_phrases_off_relinks_without_them(tmp_path, make_graph):
    folder = write_files(tmp_path / "notes", corpus())
    make_graph("x.db", graph=GRAPH).index(folder, namespace="med")
    reopened = make_graph("x.db", graph={**GRAPH, "keyphrases": False})
    assert "heart failure" in {e.key for e in reopened.entities({"med"})}
    report = reopened.build_graph(["med"])[0]
    assert report.relinked_chunks == len(corpus())
    assert reopened.entities({"med"}) == [] and reopened.communities({"med"}) == []


def test_an_entity_keeps_the_type_and_name_of_the_strongest_extractor_whatever_the_order(
        tmp_path, make_graph):
    graph = make_graph("x.db", graph={"keyphrases": False})
    graph.index(write_files(tmp_path / "notes", corpus(range(1))), namespace="med")
    store = graph.graph_store
    rowids = [rowid for rowid, _ in store.chunk_texts("med")]

    def link(name: str, etype: str) -> EntityLink:
        return EntityLink(canonical_key(name, etype), name, etype, 1, 0, 0.5)

    # One key written as phrase, name, vocabulary term, name, vocabulary term (in that
    # order, across chunks): the first vocabulary spelling wins, the second changes nothing.
    spellings = [("heart failure", "phrase"), ("Heart Failure", "name"),
                 ("Heart failure", "disease"), ("HEART FAILURE", "name"),
                 ("heart failure", "disease")]
    # Another written as phrase then name: the name wins; a third only as phrases.
    store.replace_links("med", [
        (rowids[i % len(rowids)], [link(*spellings[i])]
         + ([link("Ejection Fraction" if i else "ejection fraction",
                  "name" if i else "phrase")] if i < 2 else [])
         + [link("metformin", "phrase")])
        for i in range(len(spellings))], "test")
    found = {e.key: (e.name, e.type) for e in graph.entities({"med"}, limit=50)}
    assert found["heart failure"] == ("Heart failure", "disease")
    assert found["ejection fraction"] == ("Ejection Fraction", "name")
    assert found["metformin"] == ("metformin", "phrase")


def test_a_process_wide_vocabulary_of_any_size_chooses_what_a_fresh_one_does():
    # A long-lived process keeps one growing vocabulary for every namespace it builds; with
    # 2.2M words seen elsewhere, 3-word codes over raw word ids would overflow 64 bits.
    vocabulary = Vocabulary(PARAMS.language)
    vocabulary.tokenize(" ".join(f"elsewhere{i}" for i in range(2_200_000)))
    chunks = [vocabulary.tokenize(t) for t in corpus().values()]
    assert len(vocabulary.words) ** 3 >= 2 ** 63
    assert choose_keyphrases(chunks, vocabulary, PARAMS) == select_keyphrases(
        corpus().values(), PARAMS)
