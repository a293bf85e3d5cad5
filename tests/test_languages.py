"""Text analysis per language (``docgraph.languages``): English exactly as before, Snowball
stems and stop words for other languages, CJK bigrams, language detection, and the query
read in every language of its namespaces."""

from __future__ import annotations

import pytest

from docgraph.config import load_settings
from docgraph.errors import ConfigError
from docgraph.languages import language_terms
from docgraph.store.lexical import count_terms
from docgraph.text import index_terms, query_terms

# Today's English terms, pinned: an index built before languages were known stays valid only
# if English text keeps tokenizing exactly like this (the CJK run stays one token in English).
ENGLISH_PINNED = {
    "The running dogs were chasing cats across the houses.":
        (["run", "dog", "chase", "cat", "across", "hous"], 9),
    "Ünïcödé naïve café résumé, 42 apples":
        (["unicod", "naiv", "cafe", "resum", "42", "appl"], 6),
    "FTS5-like tokenizer_v2 and Kubernetes deployments":
        (["fts5", "like", "token", "v2", "kubernet", "deploy"], 7),
    "在市立图书馆借书 mixed with English words":
        (["在市立图书馆借书", "mix", "english", "word"], 5),
}


@pytest.mark.parametrize("text", sorted(ENGLISH_PINNED))
def test_english_terms_are_pinned(text: str) -> None:
    assert index_terms(text) == ENGLISH_PINNED[text]
    terms, length = ENGLISH_PINNED[text]
    (tf, counted), = count_terms([("", text)])  # the default: English
    assert (sorted(tf), counted) == (sorted(set(terms)), length)


def test_english_reading_is_the_old_one() -> None:
    from docgraph.languages import language_terms, query_terms_for

    for text in ENGLISH_PINNED:
        assert language_terms(text, "en") == index_terms(text)
    query = "What does error E-417 mean for the badge readers?"
    assert query_terms_for(query, {"en"}) == query_terms(query) == query_terms_for(query, ())


@pytest.mark.parametrize(("language", "one", "other"), [
    ("de", "Die Häuser der Altstadt", "ein altes Haus"),
    ("nl", "de huizen aan de gracht", "het huis"),
    ("fr", "l'élevage des chevaux", "un cheval calme"),
])
def test_inflected_forms_share_a_stem(language: str, one: str, other: str) -> None:
    from docgraph.languages import language_terms

    assert set(language_terms(one, language)[0]) & set(language_terms(other, language)[0])
    # English rules do not conflate them: the reason for per-language stemmers
    assert not set(index_terms(one)[0]) & set(index_terms(other)[0]) - {"de"}


def test_stop_words_are_the_languages_own() -> None:
    from docgraph.languages import language_terms

    assert language_terms("und der die das", "de")[0] == []
    assert language_terms("le la les des", "fr")[0] == []
    assert language_terms("und der die das", "de")[1] == 4  # they count in the length


def test_cjk_runs_become_bigrams_and_mixed_text_keeps_english_words() -> None:
    from docgraph.languages import language_terms

    terms, length = language_terms("我们使用Docker容器部署模型", "zh")
    assert terms == ["我们", "们使", "使用", "docker", "容器", "器部", "部署", "署模", "模型"]
    assert length == 9
    assert language_terms("deployments", "zh")[0] == ["deploy"]  # English rules between runs
    assert language_terms("书", "zh")[0] == ["书"]


def test_language_is_detected_from_a_short_document() -> None:
    from docgraph.languages import detect_language

    assert detect_language("Viele Häuser in den Altstädten Hessens sind Fachwerkhäuser.") == "de"
    assert detect_language("De huizen aan de Amsterdamse grachten zijn smal en hoog.") == "nl"
    assert detect_language("Les fromages sont retournés et brossés régulièrement.") == "fr"
    assert detect_language("在市立图书馆借书需要先办理读者证。") == "zh"
    assert detect_language("A sourdough starter is a living culture of wild yeasts.") == "en"
    assert detect_language("42") == "en"  # too little text to tell
    # not prose: the detector is unsure (Tagalog at 0.13) or finds no language: English
    assert detect_language("Kubernetes deployment yaml apiVersion apps/v1 kind Deployment "
                           "metadata name nginx") == "en"
    assert detect_language("aaa bbb ccc ddd eee fff ggg hhh iii jjj") == "en"


def test_the_query_is_read_in_every_language_of_its_namespaces() -> None:
    from docgraph.languages import query_terms_for

    terms = query_terms_for("Häuser 图书馆", {"en", "de", "zh"})
    assert "haus" in terms and "图书" in terms and "书馆" in terms


def test_source_languages_setting() -> None:
    from docgraph.ingest.prepare import source_language

    settings = load_settings(sources={"languages": {"/data/handbuch": "DE", "*": "auto"}})
    assert settings.sources.languages["/data/handbuch"] == "de"
    assert source_language("file:///data/handbuch", settings.sources) == "de"
    assert source_language("file:///data/other", settings.sources) == "auto"
    with pytest.raises(ConfigError, match=r"languages.*'/x'.*'german!'"):
        load_settings(sources={"languages": {"/x": "german!"}})


@pytest.mark.parametrize("language", ["zh", "ja", "de", "fr", "nl"])
def test_no_language_makes_an_empty_term(language):
    """Porter stems the "s" of "Apple's" (English words inside CJK text) to nothing: an empty
    term would be an empty lexeme, which PostgreSQL's tsvector refuses, failing the write
    of the whole document (and with it the build's permission changes and deletions)."""
    from docgraph.store.postgres.catalog import own_terms

    text = "苹果 Apple's notes, l'homme d'affaires, Peter's s 's"
    terms, _ = language_terms(text, language)
    assert terms and "" not in terms
    assert "'':" not in own_terms("Notes > Apple's", text, language)
