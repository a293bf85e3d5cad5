"""Backing up an index kept in PostgreSQL: PostgreSQL's own ``pg_dump`` of docgraph's
database, in the custom format, checked by reading its table of contents back.

docgraph keeps everything of an index in one database (its tables, the trigger functions
that keep the BM25 statistics, a text search configuration, and the ``vector`` and
``unaccent`` extensions it creates), so the backup is that whole database: dumping only
some tables would leave the trigger functions and the text search configuration behind.
``pg_dump`` reads one snapshot (a repeatable-read transaction), so servers keep serving and
refreshing while it runs. The password is handed to ``pg_dump`` in its environment
(``PGPASSWORD``), never on a command line another user could read in ``ps``.

Restoring is the operator's step (it creates a database, which docgraph never does):
:func:`restore_steps` says it, and ``docs/operations.md`` explains it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from docgraph.errors import StoreError
from docgraph.store.postgres.catalog import connection_url, redacted

#: Tables a docgraph dump must hold, checked in its table of contents.
REQUIRED_TABLES = ("schema_migrations", "meta", "documents", "chunks")


@dataclass(frozen=True)
class DumpReport:
    """A finished, checked ``pg_dump`` of docgraph's database."""

    path: Path
    database: str
    tables: int
    size_bytes: int


#: URL query parameters docgraph's URLs may carry, as the libpq variables pg_dump reads.
_QUERY_VARIABLES = {"sslmode": "PGSSLMODE", "sslrootcert": "PGSSLROOTCERT", "host": "PGHOST",
                    "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD",
                    "dbname": "PGDATABASE"}


def _tables(listing: str) -> set[str]:
    """The table names in ``pg_restore --list`` output (``<id>; <oid> <oid> TABLE <schema>
    <name> <owner>``)."""
    names = set()
    for line in listing.splitlines():
        words = line.split()
        if "TABLE" in words and "DATA" not in words and not line.startswith(";"):
            at = words.index("TABLE")
            if len(words) > at + 2:
                names.add(words[at + 2])
    return names


def _program(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise StoreError(f"{name} is not on PATH: install PostgreSQL's client programs "
                         "(Debian: postgresql-client, of the server's major version or newer)")
    return found


def _environment(url: str) -> tuple[dict[str, str], str]:
    """The libpq environment that names the database of ``url`` (password included), and
    the database's name."""
    parts = urlsplit(connection_url(url))
    env = dict(os.environ)
    for key, value in (("PGHOST", parts.hostname), ("PGPORT", parts.port),
                       ("PGUSER", parts.username), ("PGPASSWORD", parts.password)):
        if value is not None:
            env[key] = unquote(str(value))
    database = unquote(parts.path.lstrip("/"))
    if database:
        env["PGDATABASE"] = database
    for item in filter(None, parts.query.split("&")):
        key, _, value = item.partition("=")
        if key in _QUERY_VARIABLES:
            env[_QUERY_VARIABLES[key]] = unquote(value)
    return env, database


def dump_database(url: str, target: Path) -> DumpReport:
    """Write a ``pg_dump --format=custom`` of the database at ``url`` to the new file
    ``target`` and check it (``pg_restore --list`` reads its table of contents, which must
    name docgraph's tables); a :class:`StoreError` naming the file and the database (without
    its password) otherwise. Why a whole-database dump: see the module docstring."""
    target = Path(target)
    if target.exists():
        raise StoreError(f"{target} already exists: a backup never overwrites a file; "
                         "choose a new path or delete it")
    env, database = _environment(url)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    done = subprocess.run([_program("pg_dump"), "--format=custom", "--no-password",
                           f"--file={partial}"], env=env, capture_output=True, text=True,
                          check=False)
    try:
        if done.returncode != 0:
            raise StoreError(f"pg_dump of {redacted(url)} to {target} failed: "
                             f"{done.stderr.strip()[-2000:]}")
        listed = subprocess.run([_program("pg_restore"), "--list", str(partial)], env=env,
                                capture_output=True, text=True, check=False)
        if listed.returncode != 0:
            raise StoreError(f"the dump {target} cannot be read back by pg_restore: "
                             f"{listed.stderr.strip()[-2000:]}")
        tables = _tables(listed.stdout)
        missing = [name for name in REQUIRED_TABLES if name not in tables]
        if missing:
            raise StoreError(f"{redacted(url)} is not a docgraph database: its dump {target} "
                             f"has no table {', '.join(missing)}")
        partial.rename(target)
    finally:
        partial.unlink(missing_ok=True)
    return DumpReport(target, database, len(tables), target.stat().st_size)


def restore_steps(dump: Path) -> list[str]:
    """The commands that restore ``dump`` into a new database (what ``docgraph restore``
    prints for a PostgreSQL store): create it, let ``pg_restore`` recreate the extensions,
    tables and data, then point ``store.url`` at it."""
    return [
        "createdb docgraph_restored",
        "psql -d docgraph_restored -c 'CREATE EXTENSION IF NOT EXISTS vector' "
        "-c 'CREATE EXTENSION IF NOT EXISTS unaccent'",
        f"pg_restore --no-owner --exit-on-error --dbname=docgraph_restored {dump}",
        "then set store.url to postgresql://USER@HOST/docgraph_restored and restart the servers",
    ]
