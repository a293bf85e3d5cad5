"""Relative file paths in a settings file: a path written in the TOML file means a file
beside it (:data:`PATH_SETTINGS`), so a host that starts docgraph in a directory of its own
still finds the index, policy, tokens and secrets the file names."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic_settings import TomlConfigSettingsSource

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

