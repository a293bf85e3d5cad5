"""PostgreSQL migration 18 (:mod:`docgraph.store.postgres.schema` applies it after
:mod:`~docgraph.store.postgres.migrations_8_17`): the console's sign-in buckets."""

from __future__ import annotations

from typing import Final

# Sign-in buckets (migration 18): one row per client address (and the console's shared
# bucket of failing addresses), refilled and taken by one upsert per sign-in attempt
# (docgraph.store.sql.signin), shared by every server of this database so a limit per
# address holds across the fleet; idle full rows are pruned by the limiter.
_SIGNIN_BUCKETS: Final = (
    """CREATE TABLE signin_buckets (
        key text PRIMARY KEY,
        burst double precision NOT NULL,
        per_second double precision NOT NULL,
        tokens double precision NOT NULL,
        attempted_at double precision NOT NULL,
        previous_at double precision,
        wait_s double precision NOT NULL,
        previous_wait_s double precision NOT NULL,
        succeeded_at double precision
    )""",
    "CREATE INDEX signin_buckets_attempted ON signin_buckets (attempted_at)",
)

#: Migration 18.
MIGRATIONS_18: Final[tuple[tuple[str, ...], ...]] = (_SIGNIN_BUCKETS,)
