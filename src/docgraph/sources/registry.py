"""The source registry: document folders, SQL sources and the column tag registry.

Sources split on a ``kind`` discriminator above their type:

* ``documents`` - a document folder; its type is the URN scheme (``file``, ``s3``, ``sftp``,
  ``ftp``, ``hdfs``). A folder belongs to a domain (= namespace); ``UNIQUE (urn, domain)``
  lets one folder serve several domains, one namespace each. URNs are normalized at
  registration; a path change is a removal plus a new registration, never an edit.
* ``relational`` - a SQL database (a SQLAlchemy URL, stored without its password) whose
  columns can be tagged. It is not indexed by itself.
* ``table`` - derived from a ``natural_language`` column tag: one read-only source per tagged
  column and domain, named ``sql://<source>/<schema>.<table>.<column>``. It appears when the
  tag is set and disappears (with its documents) when the tag is removed.

Column tags are the whole configuration of table-derived content: ``natural_language``
(one document per row, in the tag's domain) and ``entity:<type>`` (a live vocabulary query;
its terms are matched in every namespace and never stored).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from docgraph.errors import SourceError
from docgraph.model import SourceRecord
from docgraph.sources.credentials import Credentials, credential_key, sql_credential_key
from docgraph.sources.naming import (
    check_display_name,
    check_public_url,
    default_display_name,
    display_names,
    unique_display_name,
)
from docgraph.sources.rows import derived_source_urn
from docgraph.sources.tables import ColumnRef, TableReader
from docgraph.sources.urn import SUPPORTED_SCHEMES, normalize_urn
from docgraph.store.base import StoreCatalog
from docgraph.store.lifecycle import SourceRegistryStore, StoredColumnTag, StoredSqlSource

log = logging.getLogger(__name__)

NATURAL_LANGUAGE = "natural_language"
_ENTITY_TAG = re.compile(r"^entity:([a-z][a-z0-9_-]{0,31})$")
_SOURCE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")
_SECRET_QUERY_KEYS = ("password", "secret", "token", "sslpassword", "passfile")

SourceKind = Literal["documents", "relational", "table"]

#: Runs a change that deletes indexed documents as the index's one builder:
#: ``elect(what, wait_seconds, hint)`` (see :mod:`docgraph.lifecycle.leadership`).
Elect = Callable[[str, float, str], AbstractContextManager[None]]
_WAIT_HINT = "wait with `--wait SECONDS` (wait_seconds=), or stop that process"


def _unelected(what: str, wait_seconds: float, hint: str) -> AbstractContextManager[None]:
    """No election: a registry on its own (tests of the registry alone)."""
    return contextlib.nullcontext()

def validate_tag(tag: str) -> str:
    """``natural_language`` or ``entity:<type>`` (type: lower-case letters, digits, _ and -)."""
    tag = tag.strip()
    if tag == NATURAL_LANGUAGE or _ENTITY_TAG.match(tag):
        return tag
    raise SourceError(
        f"unknown column tag {tag!r}: use 'natural_language' or 'entity:<type>' "
        "(type in lower case, e.g. entity:product)"
    )


def strip_sql_credentials(url: str) -> tuple[str, bool]:
    """The URL without its password (and secret-looking query options); True if any was
    removed. Relative SQLite paths become absolute so the URL means one database."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url.strip())
    except Exception as exc:
        raise SourceError(f"not a SQLAlchemy URL: {url!r} ({type(exc).__name__})") from exc
    stripped = parsed.password is not None
    query = {k: v for k, v in parsed.query.items()
             if not any(s in k.lower() for s in _SECRET_QUERY_KEYS)}
    stripped = stripped or len(query) != len(parsed.query)
    parsed = parsed._replace(password=None).set(query=query)  # set() ignores None values
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:") \
            and not parsed.database.startswith("file:"):
        parsed = parsed.set(database=str(Path(parsed.database).expanduser().resolve()))
    return parsed.render_as_string(hide_password=False), stripped


@dataclass(frozen=True, slots=True)
class SqlSource:
    """A registered SQL database (``kind = relational``); ``url`` has no password."""

    name: str
    url: str
    created_at: float

    @property
    def credential_env(self) -> str:
        """Prefix of the environment variables holding this source's credentials."""
        return f"DOCGRAPH_SOURCE_{sql_credential_key(self.name)}_"


@dataclass(frozen=True, slots=True)
class ColumnTag(StoredColumnTag):
    """A tag on one column of a SQL source (the stored record, see
    :class:`~docgraph.store.lifecycle.StoredColumnTag`) with what the registry derives from
    it; ``domain`` is empty for entity tags."""

    @property
    def entity_type(self) -> str | None:
        """The entity type of an ``entity:<type>`` tag, else None."""
        match = _ENTITY_TAG.match(self.tag)
        return match.group(1) if match else None

    @property
    def urn(self) -> str:
        """The derived source URN (``sql://source/schema.table.column``)."""
        return derived_source_urn(self.source, self.schema, self.table, self.column)

    @property
    def ref(self) -> ColumnRef:
        """The column reference as stored (re-resolved against the database at each build)."""
        return ColumnRef(self.source, self.schema, self.table, self.column, self.pk_column)

    def label(self) -> str:
        """``source:schema.table.column``."""
        return f"{self.source}:{self.schema}.{self.table}.{self.column}"


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """One row of the source list: documents, relational or (derived, read-only) table."""

    kind: SourceKind
    type: str
    urn: str
    domain: str | None
    read_only: bool
    credential_env: str | None
    id: int | None = None
    last_indexed_at: float | None = None
    display_name: str | None = None
    public_url: str | None = None


class SourceRegistry:
    """Registers document folders (as ``catalog`` sources), SQL sources and column tags (in
    ``store``, the backend's :class:`~docgraph.store.lifecycle.SourceRegistryStore`).

    Credentials are never stored: folder URNs lose their user info at normalization and SQL
    URLs their password; both are looked up at build time (:class:`Credentials`).

    Removals delete indexed documents, so they run through ``elect`` as the index's one
    builder (``DocGraph.sources`` passes its leadership): beside another process that
    leads, they wait up to ``wait_seconds`` and then raise
    :class:`~docgraph.errors.RefreshBusy`, having changed nothing. Registrations only add
    what the leader builds at its next round and are not elected.
    """

    def __init__(
        self,
        catalog: StoreCatalog,
        store: SourceRegistryStore,
        credentials: Credentials | None = None,
        elect: Elect | None = None,
    ) -> None:
        self.catalog = catalog
        self.store = store
        self.credentials = credentials or Credentials()
        self.elect: Elect = elect or _unelected

    # -- document folders ------------------------------------------------------

    def add_folder(self, urn_or_path: str | Path, domain: str, *,
                   display_name: str | None = None,
                   public_url: str | None = None) -> SourceRecord:
        """Register a folder (``kind = documents``) in ``domain``; idempotent (an existing
        registration is returned unchanged: change it with :meth:`update_folder`).

        ``display_name`` is how agents see the folder (default: its last path component,
        made unique in the domain); ``public_url`` the base of its citation links.
        Credentials in the URN are dropped with a warning: they must come from the
        environment or the secrets file."""
        raw = str(urn_or_path).strip()
        urn = normalize_urn(urn_or_path)
        if urlsplit(raw).scheme.lower() in SUPPORTED_SCHEMES and (urlsplit(raw).username
                                                                  or urlsplit(raw).password):
            log.warning("credentials removed from %s; set them with %s* or the secrets file",
                        urn, f"DOCGRAPH_SOURCE_{credential_key(urn)}_")
        namespace = _domain(domain)
        url = None if public_url is None else check_public_url(public_url)
        existing = self.catalog.list_sources()
        for source in existing:
            if source.urn == urn and source.namespace == namespace:
                return source
        taken = self._names_in(existing, namespace)
        if display_name is None:
            name = unique_display_name(default_display_name(urn), taken.values())
        else:
            name = check_display_name(display_name)
            self._refuse_taken(name, taken, namespace)
        return self.catalog.add_source(urn, namespace, name, url)

    def update_folder(self, urn_or_path: str | Path, domain: str, *,
                      display_name: str | None = None, public_url: str | None = None,
                      clear_public_url: bool = False) -> SourceRecord:
        """Rename a registered folder or change its public URL. Agent-visible ids follow
        the new name; ids in the stored (URN) form keep resolving."""
        urn = normalize_urn(urn_or_path)
        existing = self.catalog.list_sources()
        for source in existing:
            if source.urn == urn and source.namespace == domain and source.scheme != "sql":
                name = None
                if display_name is not None:
                    name = check_display_name(display_name)
                    others = {i: n for i, n in self._names_in(existing, domain).items()
                              if i != source.id}
                    self._refuse_taken(name, others, domain)
                url = None if public_url is None else check_public_url(public_url)
                return self.catalog.update_source(source, display_name=name, public_url=url,
                                                  clear_public_url=clear_public_url)
        raise SourceError(f"no folder {urn} registered in domain {domain!r}")

    @staticmethod
    def _names_in(sources: list[SourceRecord], namespace: str) -> dict[int, str]:
        names = display_names(sources)
        return {s.id: names[s.id] for s in sources if s.namespace == namespace and s.id in names}

    @staticmethod
    def _refuse_taken(name: str, taken: dict[int, str], namespace: str) -> None:
        if name in taken.values():
            raise SourceError(f"display name {name!r} is already used by another folder in "
                              f"domain {namespace!r}")

    def remove_folder(self, urn_or_path: str | Path, domain: str, *,
                      wait_seconds: float = 0.0) -> int:
        """Unregister a folder from ``domain`` and delete everything indexed from it
        (elected)."""
        urn = normalize_urn(urn_or_path)
        with self.elect(f"removing {urn}", wait_seconds, _WAIT_HINT):
            for source in self.catalog.list_sources():
                if source.urn == urn and source.namespace == domain:
                    return self.catalog.remove_source(source)
        raise SourceError(f"no folder {urn} registered in domain {domain!r}")

    def folders(self) -> list[SourceRecord]:
        """Registered document folders."""
        return [s for s in self.catalog.list_sources() if s.scheme in SUPPORTED_SCHEMES]

    # -- SQL sources -----------------------------------------------------------

    def add_sql_source(self, name: str, url: str) -> SqlSource:
        """Register (or re-point) SQL source ``name``; the stored URL keeps no password."""
        if not _SOURCE_NAME.match(name):
            raise SourceError(f"SQL source name {name!r}: use letters, digits, _ and -")
        stored, stripped = strip_sql_credentials(url)
        if stripped:
            log.warning("password removed from the URL of SQL source %r; set it with %s* or "
                        "the secrets file", name, f"DOCGRAPH_SOURCE_{sql_credential_key(name)}_")
        self.store.save_sql_source(StoredSqlSource(name, stored, time.time()))
        return self.sql_source(name)

    def sql_source(self, name: str) -> SqlSource:
        """A registered SQL source by name."""
        found = self.store.sql_source(name)
        if found is None:
            raise SourceError(f"no SQL source named {name!r} (add it with `docgraph sources "
                              "add-sql NAME URL`)")
        return SqlSource(found.name, found.url, found.created_at)

    def sql_sources(self) -> list[SqlSource]:
        """Every registered SQL source."""
        return [SqlSource(s.name, s.url, s.created_at) for s in self.store.sql_sources()]

    def remove_sql_source(self, name: str, *, wait_seconds: float = 0.0) -> int:
        """Unregister a SQL source, its tags and the documents derived from them
        (elected)."""
        self.sql_source(name)
        with self.elect(f"removing SQL source {name!r}", wait_seconds, _WAIT_HINT):
            self.store.remove_sql_source(name)
            return self.sync_derived_sources(also_owners={name})[1]

    def reader(self, name: str) -> TableReader:
        """A reader for SQL source ``name`` with its credentials filled in."""
        source = self.sql_source(name)
        url = self.credentials.sql_url(name, source.url)
        return TableReader(name, url, self.credentials.timeout_s)

    def sql_urls(self) -> dict[str, str]:
        """Connectable URLs (credentials filled in) of every SQL source, by name - e.g. for a
        row authorizer re-checking row documents."""
        return {s.name: self.credentials.sql_url(s.name, s.url) for s in self.sql_sources()}

    # -- column tags -----------------------------------------------------------

    def set_tag(
        self,
        source: str,
        table: str,
        column: str,
        tag: str,
        *,
        schema: str | None = None,
        domain: str | None = None,
    ) -> ColumnTag:
        """Tag a column. The column is looked up in the database first (so a typo fails
        here, not at the next build); ``natural_language`` needs a ``domain`` and a
        single-column primary key. Returns the tag with the database's spelling."""
        tag = validate_tag(tag)
        self.sql_source(source)
        if tag == NATURAL_LANGUAGE:
            if not domain:
                raise SourceError("a natural_language tag needs a domain (its namespace)")
            domain = _domain(domain)
        else:
            domain = ""
        with self.reader(source) as reader:
            ref = reader.resolve(schema, table, column)
        if tag == NATURAL_LANGUAGE and ref.pk_column is None:
            raise SourceError(
                f"{source}:{ref.schema}.{ref.table} has no single-column primary key; "
                "a natural_language column needs one (one document per row)"
            )
        if tag == NATURAL_LANGUAGE:
            clash = [t for t in self.tags() if t.tag == NATURAL_LANGUAGE and t.domain == domain
                     and t.source != source and (t.schema, t.table, t.column)
                     == (ref.schema, ref.table, ref.column)]
            if clash:
                raise SourceError(
                    f"{ref.schema}.{ref.table}.{ref.column} is already tagged natural_language "
                    f"in domain {domain!r} from SQL source {clash[0].source!r}; row document "
                    "names would collide"
                )
        saved = ColumnTag(source, ref.schema, ref.table, ref.column, tag, domain, ref.pk_column)
        self.store.save_tag(saved, time.time())
        self.sync_derived_sources()
        return saved

    def remove_tag(
        self,
        source: str,
        table: str,
        column: str,
        tag: str,
        *,
        schema: str | None = None,
        domain: str | None = None,
        wait_seconds: float = 0.0,
    ) -> int:
        """Remove a tag; a removed ``natural_language`` tag deletes its row documents
        (elected). Returns the number of documents removed."""
        tag = validate_tag(tag)
        matches = [
            t for t in self.tags()
            if t.source == source and t.tag == tag
            and t.table.casefold() == table.casefold() and t.column.casefold() == column.casefold()
            and (schema is None or t.schema.casefold() == schema.casefold())
            and (tag != NATURAL_LANGUAGE or domain is None or t.domain == domain)
        ]
        if not matches:
            raise SourceError(f"no tag {tag!r} on {source}:{schema + '.' if schema else ''}"
                              f"{table}.{column}{f' in domain {domain!r}' if domain else ''}")
        if len(matches) > 1 and (schema is None or (tag == NATURAL_LANGUAGE and domain is None)):
            raise SourceError("several tags match; name the schema and domain: "
                              + ", ".join(f"{t.label()} ({t.domain or '-'})" for t in matches))
        with self.elect(f"removing tag {tag!r} of {matches[0].label()}", wait_seconds,
                        _WAIT_HINT):
            self.store.remove_tags(matches)
            return self.sync_derived_sources()[1]

    def tags(self) -> list[ColumnTag]:
        """Every column tag, by source, schema, table, column."""
        return [ColumnTag(t.source, t.schema, t.table, t.column, t.tag, t.domain, t.pk_column)
                for t in self.store.tags()]

    def natural_language_tags(self) -> list[ColumnTag]:
        """Tags that produce row documents."""
        return [t for t in self.tags() if t.tag == NATURAL_LANGUAGE]

    def entity_tags(self) -> list[ColumnTag]:
        """Tags that produce entity vocabulary."""
        return [t for t in self.tags() if t.entity_type is not None]

    def tag_for(self, source: SourceRecord) -> ColumnTag | None:
        """The ``natural_language`` tag a derived (``sql://``) catalog source comes from."""
        for tag in self.natural_language_tags():
            if tag.urn == source.urn and tag.domain == source.namespace:
                return tag
        return None

    def sync_derived_sources(self, also_owners: set[str] | None = None) -> tuple[int, int]:
        """Make the derived ``sql://`` sources match the ``natural_language`` tags: add the
        missing ones, remove (with their documents) those of a registered SQL source (or of
        ``also_owners``) whose tag is gone. ``sql://`` sources of names never registered here
        are left alone. Returns (sources added, documents removed)."""
        wanted = {(t.urn, t.domain) for t in self.natural_language_tags()}
        names = {s.name for s in self.sql_sources()} | (also_owners or set())
        existing = [s for s in self.catalog.list_sources() if s.scheme == "sql"]
        have = {(s.urn, s.namespace) for s in existing}
        added = 0
        for urn, domain in sorted(wanted - have):
            self.catalog.add_source(urn, domain)
            added += 1
        removed = 0
        for source in existing:
            owner = urlsplit(source.urn).netloc
            if (source.urn, source.namespace) not in wanted and owner in names:
                removed += self.catalog.remove_source(source)
        return added, removed

    # -- the list --------------------------------------------------------------

    def list(self) -> list[SourceInfo]:
        """Every source: folders, SQL sources and the derived (read-only) table sources."""
        last = self.store.last_indexed()
        out: list[SourceInfo] = []
        sources = self.catalog.list_sources()
        names = display_names(sources)
        for s in sources:
            when = last.get(s.id)
            if s.scheme == "sql":
                out.append(SourceInfo("table", "sql", s.urn, s.namespace, True, None, s.id,
                                      when))
            else:
                out.append(SourceInfo("documents", s.scheme, s.urn, s.namespace, False,
                                      f"DOCGRAPH_SOURCE_{credential_key(s.urn)}_", s.id,
                                      when, names.get(s.id), s.public_url))
        for q in self.sql_sources():
            out.append(SourceInfo("relational", _backend(q.url), q.url, None, False,
                                  q.credential_env))
        return out


def _domain(domain: str) -> str:
    if not domain or not domain.strip():
        raise SourceError("a domain (namespace) name must not be empty")
    return domain.strip()


def _backend(url: str) -> str:
    return url.split(":", 1)[0].split("+", 1)[0]
