"""Credentials and connection options for sources: from the environment or a secrets file,
never from the catalog.

A stored folder URN never carries credentials (:func:`normalize_urn` strips them) and a
stored SQL URL never carries a password. At build time they are looked up here:

* environment variables ``DOCGRAPH_SOURCE_<KEY>_<OPTION>``, where ``<KEY>`` is
  :func:`credential_key` of the folder (scheme, host and non-default port, upper-cased, every
  other character an underscore: ``sftp://files.example.com:2222/x`` ->
  ``SFTP_FILES_EXAMPLE_COM_2222``) or the name of a SQL source (``crm`` -> ``CRM``).
  ``<OPTION>`` is a storage option (``USERNAME``, ``PASSWORD``, ``KEY``, ``SECRET``,
  ``ENDPOINT_URL``, ``REGION``, ``TIMEOUT``, ...); ``DOCGRAPH_SOURCE_<KEY>_OPTIONS`` may
  hold a JSON object of further options.
* the secrets file named by ``sources.secrets_file`` (TOML, keep it out of version control)::

      [folders."sftp://files.example.com/reports"]   # a folder URN or a prefix of one
      username = "svc"
      password = "..."

      [sql.crm]
      password = "..."          # or: url = "postgresql+psycopg://svc:...@db/crm"

Environment variables win over the file; for folders the longest matching URN prefix wins.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from docgraph.errors import ConfigError

ENV_PREFIX = "DOCGRAPH_SOURCE_"

_BOOL_OPTIONS = frozenset({"anon", "look_for_keys", "allow_agent", "tls", "use_ssl",
                           "compress", "gss_auth", "verify"})
_FLOAT_OPTIONS = frozenset({"timeout", "banner_timeout", "auth_timeout", "channel_timeout"})
_INT_OPTIONS = frozenset({"port", "block_size", "blocksize", "retries"})
# Friendlier (AWS-style) spellings of s3fs's option names.
_S3_ALIASES = {"access_key_id": "key", "secret_access_key": "secret", "session_token": "token",
               "username": "key", "password": "secret"}


def credential_key(urn: str) -> str:
    """The ``<KEY>`` of a folder's environment variables: scheme, host and explicit port."""
    parts = urlsplit(urn)
    raw = f"{parts.scheme}_{parts.hostname or ''}"
    if parts.port is not None:
        raw += f"_{parts.port}"
    return re.sub(r"[^A-Z0-9]", "_", raw.upper()).strip("_")


def sql_credential_key(name: str) -> str:
    """The ``<KEY>`` of a SQL source's environment variables (its name, upper-cased)."""
    return re.sub(r"[^A-Z0-9]", "_", name.upper()).strip("_")


def _coerce(option: str, value: str) -> Any:
    if option in _BOOL_OPTIONS:
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"source option {option!r} must be true or false, got {value!r}")
    try:
        if option in _FLOAT_OPTIONS:
            return float(value)
        if option in _INT_OPTIONS:
            return int(value)
    except ValueError as exc:
        raise ConfigError(f"source option {option!r} must be a number, got {value!r}") from exc
    return value


def _from_env(key: str, environ: Mapping[str, str]) -> dict[str, Any]:
    prefix = f"{ENV_PREFIX}{key}_"
    found: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(prefix):
            continue
        option = name[len(prefix):].lower()
        if option == "options":
            try:
                extra = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{name} is not a JSON object: {exc}") from exc
            if not isinstance(extra, dict):
                raise ConfigError(f"{name} must be a JSON object")
            found.update(extra)
        elif option:
            found[option] = _coerce(option, value)
    return found


def _scheme_options(scheme: str, options: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Map generic option names onto what the scheme's fsspec filesystem expects."""
    out = dict(options)
    if scheme == "s3":
        for alias, real in _S3_ALIASES.items():
            if alias in out:
                out.setdefault(real, out.pop(alias))
        client_kwargs = dict(out.pop("client_kwargs", {}) or {})
        if "region" in out:
            client_kwargs["region_name"] = out.pop("region")
        if client_kwargs:
            out["client_kwargs"] = client_kwargs
        timeout = float(out.pop("timeout", timeout_s))
        config = dict(out.pop("config_kwargs", {}) or {})
        config.setdefault("connect_timeout", timeout)
        config.setdefault("read_timeout", timeout)
        config.setdefault("retries", {"max_attempts": 2})
        out["config_kwargs"] = config
    elif scheme in ("sftp", "ssh"):
        out.setdefault("timeout", timeout_s)
        out.setdefault("banner_timeout", timeout_s)
        out.setdefault("auth_timeout", timeout_s)
    elif scheme == "ftp":
        out.setdefault("timeout", timeout_s)
    return out


class Credentials:
    """Looks up connection options for folders and SQL sources (environment + secrets file)."""

    def __init__(
        self,
        secrets_file: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.secrets_file = Path(secrets_file) if secrets_file else None
        self.environ = os.environ if environ is None else environ
        self.timeout_s = timeout_s

    def _secrets(self) -> dict[str, Any]:
        if self.secrets_file is None:
            return {}
        try:
            with self.secrets_file.open("rb") as handle:
                return tomllib.load(handle)
        except FileNotFoundError as exc:
            raise ConfigError(f"sources.secrets_file not found: {self.secrets_file}") from exc
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read secrets file {self.secrets_file}: {exc}") from exc

    def storage_options(self, urn: str) -> dict[str, Any]:
        """fsspec storage options for the folder ``urn`` (a normalized URN)."""
        from docgraph.model import urn_scheme
        from docgraph.sources.urn import normalize_urn

        scheme = urn_scheme(urn)
        options: dict[str, Any] = {}
        folders = self._secrets().get("folders", {})
        if not isinstance(folders, dict):
            raise ConfigError(f"{self.secrets_file}: [folders] must be a table")
        matches: list[tuple[int, dict[str, Any]]] = []
        for prefix, values in folders.items():
            try:
                key = normalize_urn(prefix)
            except Exception as exc:
                raise ConfigError(f"{self.secrets_file}: bad folder URN {prefix!r}: {exc}") from exc
            if urn == key or urn.startswith(key.rstrip("/") + "/"):
                if not isinstance(values, dict):
                    raise ConfigError(f"{self.secrets_file}: [folders.{prefix!r}] is no table")
                matches.append((len(key), values))
        for _, values in sorted(matches, key=lambda m: m[0]):
            options.update(values)
        options.update(_from_env(credential_key(urn), self.environ))
        return _scheme_options(scheme, options, self.timeout_s)

    def sql_url(self, name: str, stored_url: str) -> str:
        """The connectable SQLAlchemy URL of SQL source ``name`` (credentials added)."""
        from sqlalchemy.engine import make_url

        table = self._secrets().get("sql", {}).get(name, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{self.secrets_file}: [sql.{name}] must be a table")
        values: dict[str, Any] = dict(table)
        env = _from_env(sql_credential_key(name), self.environ)
        values.update(env)
        url = make_url(str(values.get("url") or stored_url))
        if values.get("username"):
            url = url.set(username=str(values["username"]))
        if values.get("password"):
            url = url.set(password=str(values["password"]))
        return url.render_as_string(hide_password=False)
