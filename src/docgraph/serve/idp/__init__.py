"""Identities from the organisation's identity provider: the web console's OpenID Connect
sign-in (:mod:`.console_signin`)."""
