"""docgraph's version, on the ground floor: every entry point (``docgraph --version``, the
HTTP health and OpenAPI documents, the MCP server's name, the console's footer) reads it
from here, and ``docgraph.__version__`` re-exports it, so no module below the package's
``__init__`` imports the package itself."""

from __future__ import annotations

#: The version of this source tree; what ``pyproject.toml`` declares.
__version__ = "0.1.0"


def installed_version() -> str:
    """The installed package's version (``importlib.metadata``), else :data:`__version__`
    (a source tree run without being installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("docgraph")
    except PackageNotFoundError:
        return __version__
