"""Agent-visible identity and citation URLs: the source as registered, never the machine.

A document's stored identity is its folder URN plus its relative path
(``file:///srv/data/corpus/support/faq.md``); that spelling stays in the catalog, the
traces and the audit log, where it is stable and unambiguous. Agents and users see the
folder's *display name* instead of its URN (``corpus/support/faq.md#chunk-12``):
:class:`PublicIdentity` maps both ways at the projection boundary, so no stored id is
rewritten and an id an agent saw before (the full form) still resolves. Row documents
(``schema.table.column/<pk>``) keep their form.

A source's optional public base URL turns a relative path into a link a person can open
(:func:`citation_url`); without one, no URL is shown (never the server's file path),
except where a result must carry one (the ``search``/``fetch`` pair): there the link is the
document's page in the web console of ``docgraph serve`` at that chunk
(:func:`console_document_url`), which shows it only to a signed-in reader.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from docgraph.errors import SourceError
from docgraph.model import SourceRecord
from docgraph.sources.urn import document_id, name_bytes

MAX_DISPLAY_NAME = 64
#: Characters a display name may not hold: they separate the id's parts or are unsafe.
_FORBIDDEN = re.compile(r"[/\\#:?%\s\x00-\x1f\x7f]")
#: Characters left as they are in a URL path (RFC 3986 pchar and ``/``).
_URL_PATH_SAFE = "/-._~!$&'()*+,;=:@"
_CHUNK_SUFFIX = re.compile(r"^(?P<doc>.+)#chunk-(?P<index>\d{1,9})$")
_CITED_KEY = re.compile(r"\[([^\[\]\s]+#chunk-\d{1,9})\]")
#: Where a base URL wants the relative path somewhere other than at its end.
PATH_PLACEHOLDER = "{path}"


def check_display_name(name: str, what: str = "display name") -> str:
    """``name`` stripped, or :class:`SourceError` naming it: 1-64 characters, no ``/``,
    ``\\``, ``#``, ``:``, ``?``, ``%``, whitespace or control characters, not ``.``/``..``."""
    cleaned = unicodedata.normalize("NFC", name.strip())
    if not cleaned or len(cleaned) > MAX_DISPLAY_NAME:
        raise SourceError(f"{what} {name!r}: must be 1-{MAX_DISPLAY_NAME} characters")
    if _FORBIDDEN.search(cleaned) or cleaned in (".", ".."):
        raise SourceError(f"{what} {name!r}: may not contain '/', '\\\\', '#', ':', '?', '%', "
                          "spaces or control characters, nor be '.' or '..'")
    return cleaned


def default_display_name(urn: str) -> str:
    """The folder's last path component (the bucket or host when the URN has no path),
    with characters a display name may not hold replaced by ``-``."""
    parts = urlsplit(urn)
    segments = [s for s in parts.path.split("/") if s]
    base = unquote(segments[-1]) if segments else (parts.hostname or "")
    base = _FORBIDDEN.sub("-", unicodedata.normalize("NFC", base)).strip("-")[:MAX_DISPLAY_NAME]
    return base if base not in ("", ".", "..") else "source"


def unique_display_name(base: str, taken: Iterable[str]) -> str:
    """``base``, else ``base-2``, ``base-3``, ... whichever is not in ``taken``."""
    used = set(taken)
    if base not in used:
        return base
    n = 2
    while f"{base[:MAX_DISPLAY_NAME - 1 - len(str(n))]}-{n}" in used:
        n += 1
    return f"{base[:MAX_DISPLAY_NAME - 1 - len(str(n))]}-{n}"


def display_names(sources: Iterable[SourceRecord]) -> dict[int, str]:
    """The effective display name of every document folder, by source id.

    A stored name is kept; a folder registered before names existed gets
    :func:`default_display_name`, made unique in its namespace in id order, so it is the
    same on every call (a new registration is checked against these names too). Table
    sources (scheme ``sql``) have none: their row documents keep their own ids."""
    folders = sorted((s for s in sources if s.scheme != "sql"), key=lambda s: s.id)
    taken: dict[str, set[str]] = {}
    for s in folders:
        if s.display_name:
            taken.setdefault(s.namespace, set()).add(s.display_name)
    out: dict[int, str] = {}
    for s in folders:
        if s.display_name:
            out[s.id] = s.display_name
            continue
        used = taken.setdefault(s.namespace, set())
        out[s.id] = unique_display_name(default_display_name(s.urn), used)
        used.add(out[s.id])
    return out


def check_public_url(url: str) -> str:
    """``url`` stripped, or :class:`SourceError` naming it: an ``http``/``https`` URL with a
    host and no fragment; ``{path}`` marks where the relative path goes (default: at the
    end)."""
    cleaned = url.strip()
    parts = urlsplit(cleaned.replace(PATH_PLACEHOLDER, "x"))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SourceError(f"public URL {url!r}: must be an http:// or https:// URL with a host")
    if parts.fragment or "#" in cleaned:
        raise SourceError(f"public URL {url!r}: may not hold a fragment ('#')")
    if PATH_PLACEHOLDER not in cleaned and parts.query:
        raise SourceError(f"public URL {url!r}: has a query; mark where the path goes "
                          f"with {PATH_PLACEHOLDER}")
    return cleaned


#: Extensions of the files whose documents carry attachments (``<mail>/<attachment>``).
MAIL_EXTENSIONS = (".eml", ".mbox", ".msg")


def carrying_file(relative_path: str) -> str | None:
    """The mail file an attachment's path lies in (``a/box.mbox`` for
    ``a/box.mbox/log.csv``), or None for a path with no mail file among its folders."""
    parts = relative_path.split("/")
    for end in range(1, len(parts)):
        if parts[end - 1].lower().endswith(MAIL_EXTENSIONS):
            return "/".join(parts[:end])
    return None


def citation_url(public_url: str | None, relative_path: str, page: int | None = None
                 ) -> str | None:
    """The link a person follows to the document at ``relative_path`` under a source whose
    public base URL is ``public_url`` (None: no link), percent-encoded, with ``#page=N``
    when a page is given. A mail's attachment (``<mail>/<attachment>``) is no file of its
    own: it links to its mail, without a page.

    >>> citation_url("https://intranet.example/docs/", "support/faq v2.md")
    'https://intranet.example/docs/support/faq%20v2.md'
    >>> citation_url("https://s3.example/b?prefix={path}", "a b.pdf", page=3)
    'https://s3.example/b?prefix=a%20b.pdf#page=3'
    >>> citation_url("https://intranet.example/docs/", "support/box.mbox/log.pdf", page=2)
    'https://intranet.example/docs/support/box.mbox'
    """
    if not public_url:
        return None
    carrier = carrying_file(relative_path)
    if carrier is not None:
        relative_path, page = carrier, None
    path = quote(name_bytes(unicodedata.normalize("NFC", relative_path.lstrip("/"))),
                 safe=_URL_PATH_SAFE)
    if PATH_PLACEHOLDER in public_url:
        url = public_url.replace(PATH_PLACEHOLDER, path)
    else:
        url = public_url.rstrip("/") + "/" + path
    return url if page is None else f"{url}#page={int(page)}"


#: Where the web console shows a document (``serve/console/routes.py`` serves it).
CONSOLE_DOCUMENTS = "/console/documents/"


def console_document_url(base_url: str, public_id: str, chunk_index: int | None = None
                         ) -> str:
    """The console page of the document ``public_id`` (its agent-visible id) on the server
    at ``base_url``, opened at chunk ``chunk_index`` (a query parameter the page reads and an
    anchor the browser scrolls to). The id is percent-encoded once more, so a ``%`` it holds
    reaches the page as it is.

    >>> console_document_url("http://127.0.0.1:8765", "corpus/support/faq v2.md", 8)
    'http://127.0.0.1:8765/console/documents/corpus/support/faq%20v2.md?chunk=8#chunk-8'
    >>> console_document_url("https://docs.example/", "eng/a%20b.md")
    'https://docs.example/console/documents/eng/a%2520b.md'
    """
    url = base_url.rstrip("/") + CONSOLE_DOCUMENTS + quote(public_id, safe="/")
    if chunk_index is None:
        return url
    return f"{url}?chunk={int(chunk_index)}#chunk-{int(chunk_index)}"


def split_key(item_id: str) -> tuple[str, int | None]:
    """(document id, chunk index) of an evidence key ``docId#chunk-N``; a document id
    alone gives (id, None)."""
    match = _CHUNK_SUFFIX.match(item_id)
    if match is None:
        return item_id, None
    return match.group("doc"), int(match.group("index"))


@dataclass(frozen=True, slots=True)
class NamedSource:
    """A document folder as agents see it."""

    namespace: str
    urn: str
    name: str
    public_url: str | None


def _canonical(urn: str, rest: str) -> str | None:
    """The stored id of ``rest`` read as a decoded relative path (None: not a path)."""
    try:
        return document_id(urn, unquote(rest))
    except SourceError:
        return None


class PublicIdentity:
    """Stored document ids <-> agent-visible ids, and citation URLs, for one set of
    registered sources (build one per request: names can change between requests).

    ``console_url`` is the base URL of the server whose console links
    :meth:`passage_url` falls back to (None: no fallback)."""

    def __init__(self, sources: Iterable[SourceRecord], console_url: str | None = None
                 ) -> None:
        self.console_url = console_url
        records = list(sources)
        names = display_names(records)
        self._by_namespace: dict[str, list[NamedSource]] = {}
        self._by_name: dict[tuple[str, str], NamedSource] = {}
        for s in records:
            if s.id not in names:
                continue
            named = NamedSource(s.namespace, s.urn, names[s.id], s.public_url)
            self._by_namespace.setdefault(s.namespace, []).append(named)
            self._by_name[(s.namespace, named.name)] = named
        for group in self._by_namespace.values():  # the longest URN prefix wins
            group.sort(key=lambda n: len(n.urn), reverse=True)

    def source_of(self, namespace: str, doc_id: str) -> NamedSource | None:
        """The folder ``doc_id`` lies in (None: a row document or community report)."""
        for named in self._by_namespace.get(namespace, ()):
            if doc_id.startswith(named.urn + "/"):
                return named
        return None

    def document(self, namespace: str, doc_id: str) -> str:
        """The agent-visible id of a stored document id: ``<display name>/<relative
        path>`` (percent-encoded as in the stored id); other ids are returned as they are."""
        named = self.source_of(namespace, doc_id)
        if named is None:
            return doc_id
        return quote(named.name, safe="") + doc_id[len(named.urn):]

    def key(self, namespace: str, key: str) -> str:
        """The agent-visible form of an evidence key or document id."""
        doc_id, index = split_key(key)
        public = self.document(namespace, doc_id)
        return public if index is None else f"{public}#chunk-{index}"

    def key_anywhere(self, key: str) -> str:
        """:meth:`key` for an id whose namespace is not at hand (context rows): the first
        namespace, by name, holding a folder the id lies in."""
        doc_id, _ = split_key(key)
        for namespace in sorted(self._by_namespace):
            if self.source_of(namespace, doc_id) is not None:
                return self.key(namespace, key)
        return key

    def cited_keys(self, text: str) -> str:
        """``text`` with every ``[<chunk id>]`` citation (context rows start with one) in
        its agent-visible form."""
        return _CITED_KEY.sub(lambda m: f"[{self.key_anywhere(m.group(1))}]", text)

    def source_name(self, namespace: str, urn: str) -> str:
        """The display name of the folder ``urn`` in ``namespace`` (else ``urn``)."""
        for named in self._by_namespace.get(namespace, ()):
            if named.urn == urn:
                return named.name
        return urn

    def url(self, namespace: str, doc_id: str, relative_path: str,
            page: int | None = None) -> str | None:
        """The citation URL of a document (None when its source has no public URL)."""
        named = self.source_of(namespace, doc_id)
        return None if named is None else citation_url(named.public_url, relative_path, page)

    def passage_url(self, namespace: str, doc_id: str, relative_path: str,
                    chunk_index: int | None = None, page: int | None = None) -> str | None:
        """A link that opens the passage for a person allowed to read it: the citation URL
        when the source publishes one (:meth:`url`), else the document's console page at
        ``chunk_index`` (None without a ``console_url``)."""
        url = self.url(namespace, doc_id, relative_path, page)
        if url is not None or self.console_url is None:
            return url
        return console_document_url(self.console_url, self.document(namespace, doc_id),
                                    chunk_index)

    def stored_candidates(self, doc_part: str, namespaces: Iterable[str]
                          ) -> list[tuple[str, str]]:
        """The (namespace, stored document id) pairs an agent-given document id may name
        within ``namespaces``, most specific first: by display name, then as a stored id
        itself (the full ``scheme://`` form an agent saw before, or a row document)."""
        ordered = sorted(set(namespaces))
        out: list[tuple[str, str]] = []
        first, sep, rest = doc_part.partition("/")
        if sep and rest and "://" not in doc_part:
            name = unquote(first)
            for namespace in ordered:
                named = self._by_name.get((namespace, name))
                if named is not None:
                    out.append((namespace, f"{named.urn}/{rest}"))
                    canonical = _canonical(named.urn, rest)  # e.g. a space not yet encoded
                    if canonical is not None and canonical != f"{named.urn}/{rest}":
                        out.append((namespace, canonical))
        out.extend((namespace, doc_part) for namespace in ordered
                   if (namespace, doc_part) not in out)
        return out
