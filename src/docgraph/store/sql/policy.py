"""The :class:`~docgraph.store.policy.PolicyStore` port on a relational catalog, written
once for both backends: rows of the ``meta`` table every schema has, so no migration."""

from __future__ import annotations

from docgraph.store.sql.dialect import SqlDatabase, run

#: The ``meta`` key the published policy is stored under.
POLICY_KEY = "fleet_policy"
#: The prefix of each server's ``meta`` key (``fleet_server:<server id>``).
SERVER_PREFIX = "fleet_server:"


class SqlPolicyStore:
    """The published policy as the ``fleet_policy`` row of ``meta``, each server as a
    ``fleet_server:<id>`` row."""

    def __init__(self, database: SqlDatabase) -> None:
        self.database = database

    def published(self) -> str | None:
        """The published policy, or None."""
        row = run(self.database, "SELECT value FROM meta WHERE key = ?",
                  (POLICY_KEY,)).fetchone()
        return None if row is None else str(row[0])

    def _put(self, key: str, value: str) -> None:
        sql = self.database.dialect.sql
        with self.database.transaction() as db:
            db.execute(sql("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key)"
                           " DO UPDATE SET value = excluded.value"), (key, value))

    def publish(self, value: str) -> None:
        """Publish ``value``, replacing what was published."""
        self._put(POLICY_KEY, value)

    def beat(self, server: str, value: str) -> None:
        """Record or refresh one server's row."""
        self._put(SERVER_PREFIX + server, value)

    def servers(self) -> dict[str, str]:
        """Every server's row, by server id."""
        rows = run(self.database, "SELECT key, value FROM meta WHERE key LIKE ?",
                   (SERVER_PREFIX + "%",)).fetchall()
        return {str(k)[len(SERVER_PREFIX):]: str(v) for k, v in rows}

    def leave(self, server: str) -> None:
        """Delete one server's row."""
        sql = self.database.dialect.sql
        with self.database.transaction() as db:
            db.execute(sql("DELETE FROM meta WHERE key = ?"), (SERVER_PREFIX + server,))
