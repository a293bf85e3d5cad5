"""An access token's claims as a docgraph caller: the user from ``[auth] user_claim``, the
groups from ``[auth] groups_claim`` (a dotted path reaches into nested objects, as Keycloak's
``realm_access.roles``). A token without the groups claim is refused (fails closed): a
provider configured to leave groups out would otherwise give every user only their own
grants, silently."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from docgraph.errors import DocgraphError

__all__ = ["TokenRefused", "claim_at", "groups_from", "user_from"]

#: Longest user id or group name taken from a token.
MAX_NAME_CHARS = 256
#: Most groups taken from one token.
MAX_GROUPS = 1000


class TokenRefused(DocgraphError):
    """An access token that is not accepted; the message says why (it goes back to the
    client in ``WWW-Authenticate``'s ``error_description``, so it names the claim or check,
    never a secret)."""


def claim_at(claims: Mapping[str, Any], path: str) -> Any:
    """The value at the dotted ``path`` (``realm_access.roles``), or None. A claim whose own
    name holds the dot (``https://example.com/groups``) is found too: the whole path is tried
    as one name first."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise TokenRefused(f"{what}: expected a name, got {type(value).__name__}")
    text = str(value).strip()
    if not text or len(text) > MAX_NAME_CHARS or any(ord(c) < 0x20 for c in text):
        raise TokenRefused(f"{what}: not a usable name")
    return text


def user_from(claims: Mapping[str, Any], user_claim: str) -> str:
    """The user id the token names in ``user_claim``; an ``email`` claim only when the token
    says it is verified (``email_verified: true``: an account whose unverified address is
    someone else's must not become them)."""
    value = claim_at(claims, user_claim)
    if value is None:
        raise TokenRefused(f"the token has no {user_claim!r} claim (auth.user_claim)")
    if user_claim.rsplit(".", 1)[-1] == "email" and claims.get("email_verified") is not True:
        raise TokenRefused(f"claim {user_claim!r}: the address is not verified "
                           "(email_verified is not true); name the user by a claim the "
                           "provider vouches for (sub, oid, preferred_username)")
    return _name(value, f"claim {user_claim!r}")


def groups_from(claims: Mapping[str, Any], groups_claim: str) -> frozenset[str]:
    """The groups the token lists in ``groups_claim`` (a list of names, or one name; an
    empty list is a user in no group). A missing claim is refused."""
    value = claim_at(claims, groups_claim)
    if value is None:
        raise TokenRefused(f"the token has no {groups_claim!r} claim (auth.groups_claim): "
                           "configure the identity provider to include the groups, or name "
                           "the claim that holds them")
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or len(items) > MAX_GROUPS:
        raise TokenRefused(f"claim {groups_claim!r}: expected a list of group names")
    return frozenset(_name(item, f"claim {groups_claim!r}") for item in items)
