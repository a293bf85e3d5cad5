"""PostgreSQL migration 23 (:mod:`docgraph.store.postgres.schema` applies it after
:mod:`~docgraph.store.postgres.migrations_22`): a failed file's permission set."""

from __future__ import annotations

from typing import Final

# Who may be told that a file failed to index, and why (the permission set it had at its
# source: NULL, every reader of the namespace; a JSON array, those principals). Failures
# recorded before get '[]', the index's owner only (fail closed), until the next build
# records them again.
_FAILURE_ACCESS: Final = (
    "ALTER TABLE failures ADD COLUMN access jsonb DEFAULT '[]'::jsonb",
)

#: Migration 23.
MIGRATIONS_23: Final[tuple[tuple[str, ...], ...]] = (_FAILURE_ACCESS,)
