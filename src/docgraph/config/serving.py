"""The settings sections of how the index is read and served: evidence (``[rag]``), who may
see what (``[governance]``), the optional chat model (``[llm]``) and the servers
(``[serve]``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from docgraph.config.section import Section


class RagSettings(Section):
    """Evidence settings: recall width, blocks returned, per-document cap.

    ``top_k`` is the legacy single knob: when only it is set it serves as both ``retrieve_k``
    and ``return_n``; explicit values win. The seed's dashed names are accepted too.
    """

    retrieve_k: int | None = Field(
        default=None, ge=1, le=1000, validation_alias=AliasChoices("retrieve_k", "retrieve-k"),
        description="Candidates lookup_knowledge retrieves before choosing its evidence "
        "blocks (the recall width); unset: top_k, else 20.",
    )
    return_n: int | None = Field(
        default=None, ge=1, le=1000, validation_alias=AliasChoices("return_n", "return-n"),
        description="Evidence blocks lookup_knowledge returns at most; unset: top_k, else 5.",
    )
    top_k: int | None = Field(
        default=None, ge=1, le=1000, validation_alias=AliasChoices("top_k", "top-k"),
        description="Legacy single knob: the value of retrieve_k and return_n where those "
        "are not set.",
    )
    max_chunks_per_document: int = Field(
        default=2,
        ge=1,
        validation_alias=AliasChoices("max_chunks_per_document", "max-chunks-per-document"),
        description="Evidence blocks of one document lookup_knowledge returns at most.",
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


class GovernanceSettings(Section):
    """Who may see what (MCP server and HTTP API): role assignments and the row re-check.

    Role assignments come from ``policy_file`` (YAML, ``assignments: [{user | group, role,
    domain}]`` and ``groups: {name: [user, ...]}``) or from the ``sql_url`` table (one of the
    two; a row whose user column is ``group:<name>`` grants to that group). A caller holds its
    user's grants and those of its groups. Row documents are re-checked in their
    source database: ``row_source_urls`` (table source name -> SQLAlchemy URL; default: the
    registered SQL sources with their credentials) under ``row_identity``.
    """

    policy_file: Path | None = Field(
        default=None,
        description="YAML role assignments (user or group, role, domain | '*') and groups."
    )
    sql_url: str | None = Field(
        default=None, description="SQLAlchemy URL of the role-assignment table's database."
    )
    sql_table: str = Field(default="user_role_assignments",
                           description="[schema.]table with user_id (or group:<name>), role, "
                                       "domain columns.")
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


class LlmSettings(Section):
    """An optional OpenAI-compatible chat model (``POST {base_url}/chat/completions``). When
    set, community reports are written by it and ``mode="global"`` map-reduces over the
    selected reports with it; when unset, both stay extractive and say so."""

    base_url: str | None = Field(default=None, description="OpenAI-compatible server URL, e.g. "
                                     "http://127.0.0.1:8000/v1; set with model.")
    model: str | None = Field(default=None, description="Model name the server expects.")
    api_key_env: str = Field(default="OPENAI_API_KEY",
                             description="Environment variable holding the API key.")
    timeout_s: float = Field(default=60.0, gt=0, le=3600,
                             description="Seconds to wait for one chat completion.")

    @model_validator(mode="after")
    def _both_or_neither(self) -> LlmSettings:
        if (self.base_url is None) != (self.model is None):
            raise ValueError("llm.base_url and llm.model must be set together "
                             f"(got base_url={self.base_url!r}, model={self.model!r})")
        return self


class ServeSettings(Section):
    """The MCP server and JSON HTTP API (``docgraph serve``, ``docgraph mcp``)."""

    host: str = Field(default="127.0.0.1", description="Interface to bind (loopback by default).")
    port: int = Field(default=8765, ge=0, le=65535,
                      description="Port `docgraph serve` listens on (--port overrides it).")
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
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or networks (CIDR, e.g. 10.0.0.0/8) of the reverse proxies "
                    "in front of `docgraph serve`: only a connection from one of them has "
                    "its X-Forwarded-For (the client address, e.g. for the console's sign-in "
                    "limit) and X-Forwarded-Proto (https: Secure cookies) believed, the "
                    "client being the nearest address in X-Forwarded-For that is not a "
                    "trusted proxy. Empty (the default): no forwarded header is believed, "
                    "not even from 127.0.0.1.",
    )
    public_url: str | None = Field(
        default=None,
        description="Base URL people open this server at (e.g. https://docs.example, behind "
                    "a proxy): the `url` of a search or fetch result whose source publishes "
                    "none is its console page under it. Default: http://<host>:<port>, "
                    "loopback for a wildcard host; `docgraph mcp` (stdio) uses it too.",
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_are_networks(cls, value: list[str]) -> list[str]:
        """Each entry an IP address or network (a host's bits set are allowed: 10.1.2.3/8
        reads as 10.0.0.0/8); written back in canonical form."""
        import ipaddress

        networks = []
        for entry in value:
            try:
                networks.append(str(ipaddress.ip_network(entry.strip(), strict=False)))
            except ValueError:
                raise ValueError(f"serve.trusted_proxies entry {entry!r}: not an IP address "
                                 "or network (name each proxy by its address, e.g. "
                                 "127.0.0.1 or 10.0.0.0/8; '*' is not accepted)") from None
        return networks

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



#: JWS algorithms an access token may be signed with: asymmetric only (a symmetric ``HS*``
#: key would have to be shared with the server, and a public key passed as an HMAC secret
#: is the classic forgery; ``none`` is no signature at all).
ASYMMETRIC_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                                   "ES256", "ES384", "ES512", "EdDSA"})


class AuthSettings(Section):
    """Identities from the organisation's identity provider (``[auth]``): ``docgraph serve``
    as an OAuth 2.1 resource server (the MCP authorization spec: access tokens issued by
    the provider, beside the static bearer tokens of service accounts), which claims name
    the user and the groups, and the web console's sign-in through the provider (an OIDC
    client of the issuer; admin by group)."""

    issuer: str | None = Field(
        default=None,
        description="Issuer URL of the authorization server / OIDC provider whose access "
                    "tokens `docgraph serve` accepts (its metadata is read from "
                    "/.well-known/oauth-authorization-server or openid-configuration under "
                    "it). Unset: only static bearer tokens.",
    )
    audience: str | None = Field(
        default=None,
        description="The `aud` a token must carry; default: the server's MCP URL "
                    "(<serve.public_url or http://host:port>/mcp), the RFC 8707 resource "
                    "indicator hosts ask for.",
    )
    scopes: list[str] = Field(
        default_factory=list,
        description="Scopes every identity-provider token must hold (403 insufficient_scope "
                    "otherwise); empty: none required.",
    )
    user_claim: str = Field(default="sub", description="Claim naming the user (sub, email, "
                            "preferred_username, oid, ...).")
    groups_claim: str = Field(
        default="groups",
        description="Claim holding the user's groups (a list, or one name); a dotted path "
                    "reaches into nested objects, e.g. realm_access.roles. A token without "
                    "it is refused.",
    )
    algorithms: list[str] = Field(
        default_factory=lambda: ["RS256", "ES256"],
        description="Signature algorithms accepted (pinned; asymmetric only: never none or "
                    "HS*).",
    )
    clock_skew_s: int = Field(default=60, ge=0, le=600,
                              description="Seconds of clock difference allowed on exp/nbf/iat.")
    jwks_cache_s: int = Field(
        default=300, ge=10, le=86400,
        description="Seconds the issuer's signing keys (JWKS) are kept before being read "
                    "again; a token naming an unknown key id re-reads them at once (at most "
                    "every 10 s), so a key rotation is followed.",
    )
    introspection_url: str | None = Field(
        default=None,
        description="RFC 7662 introspection endpoint for opaque (non-JWT) access tokens; "
                    "unset: the issuer's metadata `introspection_endpoint` is not used "
                    "either, and opaque tokens are refused.",
    )
    introspection_client_id: str | None = Field(
        default=None, description="Client id the introspection endpoint authenticates "
                                  "(HTTP Basic).")
    introspection_client_secret: str | None = Field(
        default=None, description="Client secret for the introspection endpoint; give it "
                                  "in the environment (DOCGRAPH_AUTH__INTROSPECTION_CLIENT_"
                                  "SECRET) rather than in the settings file.")
    console_client_id: str | None = Field(
        default=None,
        description="Client id of the web console at the issuer (console sign-in through "
                    "the identity provider: authorization code + PKCE). The console's "
                    "redirect URI to register is <public URL>/console/oidc/callback.",
    )
    console_client_secret: str | None = Field(
        default=None,
        description="Client secret of the console's client (a confidential client); unset "
                    "for a public client (PKCE only).",
    )
    admin_group: str | None = Field(
        default=None,
        description="Group whose members may sign in to the console through the identity "
                    "provider (read from groups_claim of the id_token); a user in no such "
                    "group gets nothing.",
    )

    @field_validator("algorithms")
    @classmethod
    def _asymmetric_only(cls, value: list[str]) -> list[str]:
        bad = [a for a in value if a not in ASYMMETRIC_ALGORITHMS]
        if bad or not value:
            accepted = ", ".join(sorted(ASYMMETRIC_ALGORITHMS))
            raise ValueError(f"auth.algorithms {bad or value!r}: only asymmetric signature "
                             f"algorithms are accepted ({accepted})")
        return value

    @field_validator("issuer", "introspection_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None:
            from urllib.parse import urlsplit

            parts = urlsplit(value.strip())
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
                    or parts.fragment:
                raise ValueError(f"{value!r}: must be an http:// or https:// URL with a "
                                 "host and without query or fragment (RFC 8414)")
            return value.strip()
        return value

    @field_validator("user_claim", "groups_claim")
    @classmethod
    def _claim_named(cls, value: str) -> str:
        if not value.strip() or any(not part for part in value.strip().split(".")):
            raise ValueError(f"{value!r}: name a claim (a dotted path for a nested one)")
        return value.strip()

    @property
    def console_sign_in(self) -> bool:
        """Whether the console offers sign-in through the identity provider: issuer,
        console client id and admin group all set."""
        return bool(self.issuer and self.console_client_id and self.admin_group)
