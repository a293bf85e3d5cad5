"""The organisation's identity provider: ``docgraph serve`` as an OAuth 2.1 resource server
(issuer metadata and signing keys in :mod:`.discovery`, access tokens checked in
:mod:`.tokens`, claims to callers in :mod:`.claims`, the 401/403 challenges and the
protected resource metadata in :mod:`.resource`) and the web console's OpenID Connect
sign-in (:mod:`.console_signin`)."""
