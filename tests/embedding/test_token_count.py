"""Memoized WordPiece counts equal the real tokenizer's counts, for any text."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from docgraph.embedding.embedders import MiniLMEmbedder
from docgraph.embedding.token_count import WordPieceCounter

MODEL = MiniLMEmbedder()
COUNTER = MODEL.token_counter()
RAW = COUNTER._load()._tokenizer  # the bundled tokenizer without truncation or padding


def truth(texts: list[str]) -> list[int]:
    return [len(RAW.encode(t, add_special_tokens=False).ids) for t in texts]


# Letters with accents and combining marks, CJK, Greek sigma, punctuation, symbols, digits,
# every kind of space and control character (including those BERT deletes), zero-width.
ALPHABET = st.sampled_from(
    list("abcXYZ019 .,;:!?-_'\"()[]{}<>@#$%^&*+=/\\|~`")
    + list("éÉüßΣσςİıøÅ\u0301\u0308ﬁ½²©°±µ€£")
    + list("中文字。、！？「」한국어日本ー")
    + list("\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2009\u200a\u2028\u2029"
           "\u202f\u205f\u3000\u200b\u200d\ufeff\x00\x07\x7f\ufffd")
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(ALPHABET, max_size=60), max_size=6))
def test_counts_equal_the_tokenizer_for_any_text(texts):
    counter = WordPieceCounter(RAW)
    assert counter.count(texts) == truth(texts)
    assert counter.count(texts) == truth(texts)  # second time from the memo


def test_real_prose_and_long_words():
    texts = [
        "Alterations of the architecture of cerebral white matter in the developing human "
        "brain can affect cortical development.",
        "x" * 150 + " short " + "y" * 99,  # over WordPiece's 100-character word limit: [UNK]
        "- a list item with IL-6/STAT3 signalling (p < 0.05) and naïve T-cells",
        "",
        "   ",
    ]
    counter = WordPieceCounter(RAW)
    assert counter.count(texts) == truth(texts)
    assert MODEL.count_tokens(texts) == truth(texts)


def test_a_full_memo_starts_over_and_stays_exact():
    counter = WordPieceCounter(RAW, max_words=5)
    texts = [f"word{i} other{i} more{i}" for i in range(20)]
    for text in texts:
        assert counter.count([text]) == truth([text])
    assert len(counter._memo) <= 5 + 3


def test_concurrent_counts_are_exact():
    counter = WordPieceCounter(RAW, max_words=50)
    texts = [f"thread text {i} with words w{i % 37} and v{i % 11}" for i in range(300)]
    expected = truth(texts)
    errors: list[str] = []

    def work(offset: int) -> None:
        for i in range(offset, len(texts), 4):
            if counter.count([texts[i]]) != [expected[i]]:
                errors.append(texts[i])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_unseen_words_split_over_several_encodes_stay_exact(monkeypatch):
    import docgraph.embedding.token_count as token_count

    monkeypatch.setattr(token_count, "_WORDS_PER_ENCODE", 7)  # many encode calls, odd cuts
    texts = [f"naïve{i} IL-{i}/STAT3 中文{i} x{'y' * (i * 7 % 130)} (p<0.0{i}) ﬁn{i}ß"
             for i in range(40)]
    counter = WordPieceCounter(RAW)
    assert counter.count(texts) == truth(texts)
