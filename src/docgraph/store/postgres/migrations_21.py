"""PostgreSQL migration 21 (:mod:`docgraph.store.postgres.schema` applies it after
:mod:`~docgraph.store.postgres.migrations_18_20`): BM25 terms per language.

PostgreSQL's own analysis (``to_tsvector`` with the English configuration, the generated
``chunks.lexemes``) stays what English chunks are indexed by, so an existing index keeps its
terms. A chunk of a document in another language carries the terms docgraph's analyser
made of it (:func:`docgraph.languages.language_terms`: the language's Snowball stems and
stop words, CJK bigrams; PostgreSQL has no Chinese parser) in the new nullable ``lexical``
column, and the chunk triggers read ``coalesce(lexical, lexemes)``: the same terms the
embedded store indexes for that document. ``documents.language`` is the language each
document was analysed in (NULL: written before, English); ``namespaces.languages`` lists the
languages other
than English its documents were analysed in, which a query of the namespace is read in too.
Adding a nullable column and a column with a constant default rewrites no table.
"""

from __future__ import annotations

from typing import Final

from docgraph.store.postgres.migrations_8_17 import MIGRATIONS_8_17

# The chunk triggers of migration 17, reading a chunk's own terms where it has them.
_INSERTED, _DELETED = MIGRATIONS_8_17[-1][-2:]
_OWN_TERMS = "unnest(coalesce(c.lexical, c.lexemes))"

_LANGUAGES: Final = (
    "ALTER TABLE namespaces ADD COLUMN languages text NOT NULL DEFAULT ''",
    "ALTER TABLE documents ADD COLUMN language text",
    "ALTER TABLE chunks ADD COLUMN lexical tsvector",
    _INSERTED.replace("unnest(c.lexemes)", _OWN_TERMS),
    _DELETED.replace("unnest(c.lexemes)", _OWN_TERMS),
)

#: Migration 21.
MIGRATIONS_21: Final[tuple[tuple[str, ...], ...]] = (_LANGUAGES,)
