"""One typed settings object, loaded from ``docgraph.toml`` and ``DOCGRAPH_*`` environment.

Precedence (highest first): explicit keyword arguments, environment variables
(``DOCGRAPH_EMBED__MODEL=hashing``: section and key joined by a double underscore), the TOML
file, then the defaults of the section models. The TOML file is ``./docgraph.toml`` unless
``DOCGRAPH_CONFIG`` names another one. A relative file path written in the TOML file
(``store.path``, ``governance.policy_file``, ...: :data:`PATH_SETTINGS`) is relative to the
file's folder; one from the environment or a keyword argument is relative to the current
directory.

The package is on the ground floor: it imports nothing of docgraph but :mod:`docgraph.errors`.
Its modules: :mod:`~docgraph.config.indexing` (the sections of how the index is stored,
built, ranked and kept fresh), :mod:`~docgraph.config.retrieval` (cohort search: lanes,
pools, ranking), :mod:`~docgraph.config.serving` (how it is read and served:
evidence, governance, the chat model, the servers), :mod:`~docgraph.config.paths` (relative
file paths of a settings file), :mod:`~docgraph.config.settings` (the whole object, loading
it, and error messages naming the setting) and :mod:`~docgraph.config.reference` (the
generated ``docs/settings.md``).
"""

from __future__ import annotations

from docgraph.config.indexing import (
    DEFAULT_MAX_OCR_PAGES,
    DEFAULT_MAX_TEXT_CHARS,
    DEFAULT_MAX_UNPACKED_BYTES,
    DEFAULT_PG_EF_SEARCH,
    EmbedSettings,
    GraphSettings,
    IndexSettings,
    LoaderSettings,
    PermissionsTable,
    RefreshSettings,
    SourcesSettings,
    StoreSettings,
)
from docgraph.config.paths import (
    PATH_SETTINGS,
    SQL_URL_SETTINGS,
    FileRelativeTomlSource,
    resolve_file_paths,
)
from docgraph.config.retrieval import RetrievalSettings
from docgraph.config.serving import (
    AuthSettings,
    GovernanceSettings,
    LlmSettings,
    RagSettings,
    ServeSettings,
)
from docgraph.config.settings import (
    DEFAULT_CONFIG_FILE,
    Settings,
    check_environment,
    describe_validation_error,
    load_settings,
)
from docgraph.config.telemetry import TelemetrySettings

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "DEFAULT_MAX_OCR_PAGES",
    "DEFAULT_MAX_TEXT_CHARS",
    "DEFAULT_MAX_UNPACKED_BYTES",
    "DEFAULT_PG_EF_SEARCH",
    "PATH_SETTINGS",
    "SQL_URL_SETTINGS",
    "AuthSettings",
    "EmbedSettings",
    "FileRelativeTomlSource",
    "GovernanceSettings",
    "GraphSettings",
    "IndexSettings",
    "LlmSettings",
    "LoaderSettings",
    "PermissionsTable",
    "RagSettings",
    "RefreshSettings",
    "RetrievalSettings",
    "ServeSettings",
    "Settings",
    "SourcesSettings",
    "StoreSettings",
    "TelemetrySettings",
    "check_environment",
    "describe_validation_error",
    "load_settings",
    "resolve_file_paths",
]
