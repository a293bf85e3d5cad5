"""The sign-in-limit port written once for every relational backend.

Table (SQLite: :func:`docgraph.store.sqlite.signin.create_signin_table`; PostgreSQL:
migration 18 of :mod:`docgraph.store.postgres.schema`): ``signin_buckets(key, burst,
per_second, tokens, attempted_at, previous_at, wait_s, previous_wait_s, succeeded_at)``.

:meth:`SqlSignInLimitStore.take` is one ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``:
the refill, the take and the answer happen under the row's lock in one statement, so two
processes attempting at once on one key cannot both take its last token, and an attempt
costs one round trip. The values of the insert (``excluded``) carry the parameters, so no
parameter is repeated; every expression in ``SET`` reads the row as it was.
"""

from __future__ import annotations

from docgraph.errors import StoreError
from docgraph.store.signin import BucketTake
from docgraph.store.sql.dialect import SqlDatabase, run

#: Longest bucket key stored (addresses are far shorter; the limiter shortens others).
MAX_KEY_CHARS = 200

#: A bucket holding this much holds a token (a refill of exactly one token may add up to a
#: hair less in floating point).
WHOLE_TOKEN = 0.999999999

_REFILLED = ("{least}(excluded.burst, b.tokens + {greatest}(0, excluded.attempted_at"
             " - b.attempted_at) * excluded.per_second)")
_TAKE = """
INSERT INTO signin_buckets AS b (key, burst, per_second, tokens, attempted_at, previous_at,
                                 wait_s, previous_wait_s, succeeded_at)
VALUES (?, ?, ?, ?, ?, NULL, 0, 0, NULL)
ON CONFLICT (key) DO UPDATE SET
    burst = excluded.burst,
    per_second = excluded.per_second,
    tokens = CASE WHEN {refilled} >= {whole} THEN {refilled} - 1 ELSE {refilled} END,
    wait_s = CASE WHEN {refilled} >= {whole} THEN 0
                  ELSE (1 - {refilled}) / excluded.per_second END,
    previous_wait_s = b.wait_s,
    previous_at = b.attempted_at,
    attempted_at = {greatest}(b.attempted_at, excluded.attempted_at)
RETURNING wait_s, previous_wait_s, previous_at, succeeded_at
"""


def _take_statement(dialect_name: str) -> str:
    """The take statement in the backend's spelling of two-argument min/max."""
    least, greatest = ("LEAST", "GREATEST") if dialect_name == "postgres" else ("min", "max")
    refilled = _REFILLED.format(least=least, greatest=greatest)
    return _TAKE.format(refilled=refilled, greatest=greatest, whole=WHOLE_TOKEN)


class SqlSignInLimitStore:
    """The :class:`~docgraph.store.signin.SignInLimitStore` port on a relational catalog."""

    def __init__(self, database: SqlDatabase) -> None:
        self.database = database
        self._take = _take_statement(database.dialect.name)

    def take(self, key: str, now: float, burst: float, per_second: float) -> BucketTake:
        """Refill and take in one statement (see the module docstring)."""
        if not key or len(key) > MAX_KEY_CHARS:
            raise StoreError(f"sign-in bucket key {key[:40]!r}: expected 1 to "
                             f"{MAX_KEY_CHARS} characters")
        if burst < 1 or per_second <= 0:
            raise StoreError(f"sign-in bucket {key!r}: burst {burst} must be at least 1 and "
                             f"rate {per_second} positive")
        rows = run(self.database, self._take,
                   (key, float(burst), float(per_second), float(burst) - 1, float(now))
                   ).fetchall()  # drained, so SQLite's implicit transaction ends here
        wait, previous_wait, previous_at, succeeded_at = rows[0]
        return BucketTake(float(wait), float(previous_wait),
                          None if previous_at is None else float(previous_at),
                          None if succeeded_at is None else float(succeeded_at))

    def succeeded(self, key: str, now: float) -> None:
        """Record a successful sign-in from ``key``."""
        run(self.database, "UPDATE signin_buckets SET succeeded_at = ? WHERE key = ?",
            (float(now), key))

    def prune(self, idle_before: float, now: float, succeeded_before: float) -> int:
        """Delete idle, full buckets without a recent success."""
        gone = run(self.database,
                   "DELETE FROM signin_buckets WHERE attempted_at < ?"
                   " AND tokens + (? - attempted_at) * per_second >= burst"
                   " AND (succeeded_at IS NULL OR succeeded_at < ?) RETURNING key",
                   (float(idle_before), float(now), float(succeeded_before))).fetchall()
        return len(gone)
