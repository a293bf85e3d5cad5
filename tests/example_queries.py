"""The example questions of ``examples/QUERIES.md``, parsed once for the tests and benches.

Shared by ``tests/test_e2e.py`` and ``bench/agent_loop.py``. Each ``## Qn.`` block gives the
question, an ``**Answer:**``, a ``**Source:**`` line and ``**Answer words:**``. On the source
line, files joined by `` + `` are each needed (one hop each); the files of one hop, the first
and those in ``(also ...)``, each hold that hop's fact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

QUERIES = Path(__file__).resolve().parents[1] / "examples" / "QUERIES.md"

_BACKTICKED = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class ExampleQuestion:
    """One example question: its gold files per hop and the words that carry its answer."""

    number: int
    question: str
    answer: str
    hops: tuple[frozenset[str], ...]
    answer_words: tuple[str, ...]
    kind: str

    @property
    def sources(self) -> frozenset[str]:
        """Every file named as holding (part of) the answer."""
        return frozenset().union(*self.hops)


def _field(lines: list[str], name: str) -> str:
    prefix = f"- **{name}:**"
    for line in lines:
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    raise ValueError(f"{QUERIES.name}: a question has no {name!r} line")


def example_questions(path: Path = QUERIES) -> list[ExampleQuestion]:
    """The questions of ``path`` in order."""
    out: list[ExampleQuestion] = []
    for block in re.split(r"\n## ", path.read_text(encoding="utf-8"))[1:]:
        lines = block.splitlines()
        heading = re.match(r"Q(\d+)\.\s*(.+)", lines[0])
        if heading is None:
            raise ValueError(f"{path.name}: unexpected heading {lines[0]!r}")
        hops = tuple(frozenset(_BACKTICKED.findall(part))
                     for part in _field(lines, "Source").split(" + "))
        if not hops or not all(hops):
            raise ValueError(f"{path.name}: Q{heading.group(1)} names no source file")
        words = tuple(_BACKTICKED.findall(_field(lines, "Answer words")))
        if not words:
            raise ValueError(f"{path.name}: Q{heading.group(1)} has no answer words")
        out.append(ExampleQuestion(
            number=int(heading.group(1)), question=heading.group(2).strip(),
            answer=_field(lines, "Answer"), hops=hops, answer_words=words,
            kind=_field(lines, "Kind")))
    return out
