"""Entity extraction per extractor, and normalization to canonical keys."""

from __future__ import annotations

import pytest

from docgraph.graph.extract import (
    EntityExtractor,
    PatternExtractor,
    ProperNameExtractor,
    VocabularyMatcher,
)
from docgraph.graph.normalize import canonical_key, identifier_aliases


def _found(mentions):
    return {(m.text, m.type) for m in mentions}


def test_vocabulary_matches_whole_words_case_insensitively():
    vocab = VocabularyMatcher()
    vocab.add("product", ["Tern T3", "Roost"])
    text = "The tern t3 fleet talks to ROOST; Roosters and Tern T30 are not products."
    found = _found(vocab.find(text))
    assert found == {("tern t3", "product"), ("ROOST", "product")}
    keys = {m.key for m in vocab.find(text)}
    assert keys == {"tern t3", "roost"}


def test_vocabulary_identifier_aliases_map_to_one_entity():
    vocab = VocabularyMatcher()
    vocab.add_identifier("customer_id")
    mentions = vocab.find("Join on customer_id; every customer has one customer id.")
    assert {m.key for m in mentions} == {"customer"}
    assert len(mentions) == 3


def test_vocabulary_fingerprint_changes_with_terms():
    a, b = VocabularyMatcher(), VocabularyMatcher()
    a.add("product", ["Tern T3"])
    b.add("product", ["Tern T3"])
    assert a.fingerprint() == b.fingerprint()
    b.add("product", ["Heron H7"])
    assert a.fingerprint() != b.fingerprint()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Patch CVE-2025-29174 now.", ("CVE-2025-29174", "cve")),
        ("See SUP-4502 and INC-2025-007.", ("INC-2025-007", "ticket")),
        ("The robot raised E-417 twice.", ("E-417", "code")),
        ("Upgrade to firmware 5.3.1 today.", ("5.3.1", "version")),
        ("Mail priya.raman@halyard.example please.", ("priya.raman@halyard.example", "email")),
        ("Docs at https://h.example/r?x=1.", ("https://h.example/r?x=1", "url")),
        ("A credit of €18,400 was issued.", ("€18,400", "amount")),
        ("The contract is worth 1.24 million GBP.", ("1.24 million GBP", "amount")),
    ],
)
def test_pattern_extractor_finds_identifiers(text, expected):
    assert expected in _found(PatternExtractor().find(text))


def test_pattern_extractor_ignores_plain_words_and_numbers():
    assert PatternExtractor().find("We met at 10 and agreed on three things.") == []


def test_version_keys_ignore_a_leading_v():
    keys = {m.key for m in PatternExtractor().find("v5.3.1 replaced 5.3.1-rc2 and 5.3.1.")}
    assert "5.3.1" in keys and "5.3.1-rc2" in keys


def test_proper_names_skip_sentence_initial_capitals_and_keep_multiword_names():
    text = ("Restart the unit. Then Mei Tanaka called Nordhaven Logistics about the Port of "
            "Rotterdam. The SLA was met.")
    found = _found(ProperNameExtractor().find(text))
    assert ("Mei Tanaka", "name") in found
    assert ("Nordhaven Logistics", "name") in found
    assert ("Port of Rotterdam", "name") in found
    assert ("SLA", "acronym") in found
    assert not any(t in {"Restart", "Then", "The"} for t, _ in found)


def test_proper_names_drop_possessives_and_shouted_headings():
    found = _found(ProperNameExtractor().find("We asked Priya Raman's team. FIRMWARE SYNC NOTES"))
    assert ("Priya Raman", "name") in found
    assert not any("FIRMWARE" in t for t, _ in found)


def _names(text):
    return [m.text for m in ProperNameExtractor().find(text) if m.type == "name"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a signature whose line break was lost in extraction
        ("Regards, Joost van Dijk Site Operations Manager, Rotterdam Maasvlakte DC",
         ["Joost van Dijk", "Site Operations Manager", "Rotterdam Maasvlakte DC"]),
        ("We met Priya Raman Head of Customer Support and Oliver Hughes Sales Director.",
         ["Priya Raman", "Head of Customer Support", "Oliver Hughes", "Sales Director"]),
        # table cells run together: a title, a field label, a person
        ("Incident commander Mei Tanaka, Roost Platform Lead Author Mei Tanaka, reviewed",
         ["Mei Tanaka", "Roost Platform Lead", "Mei Tanaka"]),
        # coordination splits, titled things with "and" stay whole
        ("The Travel and Expense Policy covers Heron H7 and Plover P2 trips.",
         ["Travel and Expense Policy", "Heron H7", "Plover P2"]),
        # a capitalized function word inside a run, a possessive
        ("It is supported. Safety The Heron H7 complies, said Halyard's Firmware Release Manager "
         "agreed.", ["Heron H7", "Halyard", "Firmware Release Manager"]),
        # field labels before a colon, units and currencies next to numbers
        ("Customer: Brightwell Grocers - Daventry DC Caller: Dev Patel",
         ["Brightwell Grocers", "Daventry DC", "Dev Patel"]),
        ("alert above 600 MB Mei Tanaka, in Corby and Leeds GBP 130 per night",
         ["Mei Tanaka", "Corby", "Leeds"]),
        # a verb opening a sentence or list item
        ("Done. Describes Roost Fleet Manager 3.8.2.\n- Informed Oliver Hughes today",
         ["Roost Fleet Manager", "Oliver Hughes"]),
        # a heading repeated by the text under it
        ("Travel and Expense Policy Policy owner: Ruben Claes",
         ["Travel and Expense Policy", "Ruben Claes"]),
    ],
)
def test_proper_names_split_runs_at_title_label_and_coordination_boundaries(text, expected):
    assert _names(text) == expected


def test_proper_names_end_at_a_short_line_but_go_on_in_wrapped_prose():
    assert _names("Signed by Joost van Dijk\nSite Operations Manager") == [
        "Joost van Dijk", "Site Operations Manager"]
    wrapped = ("Escalations go to tier 2 or the duty manager. Benelux: Lukas Becker (Senior Field\n"
               "Service Engineer). UK: Gareth Pryce.")
    assert _names(wrapped) == ["Lukas Becker", "Senior Field Service Engineer", "Gareth Pryce"]
    rows = ("Activity: Release scope and schedule; Responsible: Tomasz Nowak; Consulted: Hannah "
            "Lindqvist\nActivity: Security fixes")
    assert _names(rows) == ["Tomasz Nowak", "Hannah Lindqvist"]


def test_greetings_and_markup_do_not_become_part_of_names():
    assert _names("Dear Joost,\nthanks. Hi Niamh, see below.\n- **Upgrade Roost Fleet "
                  "Manager to 3.8.2.**") == ["Joost", "Niamh", "Roost Fleet Manager"]


def test_product_names_ending_in_a_title_word_stay_whole():
    assert _names("We upgraded the Roost Fleet Manager and the Firmware Release Manager.") == [
        "Roost Fleet Manager", "Firmware Release Manager"]


def test_extractor_prefers_vocabulary_then_patterns_over_names():
    extractor = EntityExtractor()
    extractor.vocabulary.add("product", ["Tern T3"])
    links = {link.key: link for link in extractor.links(
        "Yesterday the Tern T3 hit E-417. Later the Tern T3 recovered; Mei Tanaka checked it."
    )}
    assert links["tern t3"].type == "product"
    assert links["tern t3"].frequency == 2
    assert links["e-417"].type == "code"
    assert links["mei tanaka"].type == "name"
    assert links["tern t3"].first_position < links["e-417"].first_position
    assert 0 < links["mei tanaka"].score <= links["tern t3"].score <= 1


def test_extractor_respects_the_per_chunk_cap():
    text = " ".join(f"SUP-{1000 + i}" for i in range(50))
    assert len(EntityExtractor(max_entities_per_chunk=10).links(text)) == 10


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Kestrel's", "KESTREL"),
        ("Nordhaven Logistics", "nordhaven logistic"),
        ("“Roost”", "roost"),
        ("Ｔｅｒｎ Ｔ３", "tern t3"),  # full-width forms fold by NFKC
        ("Gdańsk", "GDAŃSK"),
        ("Straße", "STRASSE"),
        ("Москва", "МОСКВА"),
        ("東京", "東京"),
        ("Ελλάδα", "ΕΛΛΆΔΑ"),
    ],
)
def test_canonical_key_folds_case_width_and_possessives_in_any_script(a, b):
    assert canonical_key(a) == canonical_key(b)
    assert canonical_key(a)


def test_canonical_key_keeps_identifiers_distinct():
    assert canonical_key("SUP-4502", "ticket") != canonical_key("SUP-4503", "ticket")
    assert canonical_key("docs", "name") == "doc"
    assert canonical_key("SUP-4502s", "ticket") == "sup-4502s"  # no singularization of ids


def test_identifier_aliases():
    assert identifier_aliases("customer_id") == ["customer id", "customer"]
    assert identifier_aliases("orderNumber") == ["order number", "order"]
    assert identifier_aliases("region") == ["region"]
