// A real OpenID Connect provider for the tests: node-oidc-provider (npm `oidc-provider`,
// pinned in .ci/run) on a loopback port. Started by tests/idp/provider.py, which passes its
// configuration as JSON in the environment variable OIDC_TEST_CONFIG:
// (and the package's folder in OIDC_PROVIDER_PACKAGE):
//   {"port": 43117, "users": {"alice": ["eng", "docgraph-admins"], ...},
//    "clients": [{"client_id": ..., "client_secret": ..., "redirect_uris": [...]}],
//    "admin_key": "<random>", "ttl": {"AccessToken": 120, ...}}
//
// What it does, and why:
// - two (or more) users, each with a `groups` claim in the id_token (claims of the `openid`
//   scope, conformIdTokenClaims off) and in JWT access tokens (extraTokenClaims);
// - PKCE required for every client (S256), short token lifetimes;
// - resource indicators (RFC 8707): a token asked for `resource=<url>` is a JWT whose `aud`
//   is that URL, signed with the current key;
// - dynamic client registration (RFC 7591) at /reg, and the pre-registered clients given;
// - the development interactions (a login form taking any password; the user is the login
//   name, an unknown one is refused) and consent given automatically (loadExistingGrant), so
//   a test signs in with one form POST, from httpx or a browser;
// - key rotation: POST /_test/rotate-keys with `Authorization: Bearer <admin_key>` swaps in a
//   provider signing with a fresh key whose JWKS no longer holds the old one. Clients,
//   grants and sessions live in one in-process memory store shared by both, so they survive.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

// ES modules ignore NODE_PATH: the package is imported from the folder the fixture names
// (.ci/node/node_modules/oidc-provider), whose entry point is lib/index.js.
const lib = (...parts) => pathToFileURL(join(process.env.OIDC_PROVIDER_PACKAGE, 'lib', ...parts)).href;
const { default: Provider } = await import(lib('index.js'));
// The library's in-memory adapter, over one store shared by every provider this process
// builds (each Provider would otherwise make its own), so a key rotation keeps clients,
// grants and sessions.
const { createMemoryAdapter } = await import(lib('adapters', 'memory_adapter.js'));
const sharedAdapter = createMemoryAdapter(0);

const config = JSON.parse(process.env.OIDC_TEST_CONFIG || '{}');
const port = config.port;
const issuer = `http://127.0.0.1:${port}`;
const users = config.users || {};
const cookieKeys = [randomBytes(32).toString('hex')];

function freshKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = privateKey.export({ format: 'jwk' });
  return { ...jwk, kid: randomBytes(8).toString('hex'), alg: 'RS256', use: 'sig' };
}

function account(id) {
  if (!Object.hasOwn(users, id)) return undefined;
  return {
    accountId: id,
    async claims() {
      return {
        sub: id,
        preferred_username: id,
        name: id,
        email: `${id}@example.test`,
        email_verified: true,
        groups: users[id],
      };
    },
  };
}

function asList(value) {
  if (value === undefined) return [];
  return Array.isArray(value) ? value : [value];
}

function build(key) {
  const provider = new Provider(issuer, {
    adapter: sharedAdapter,
    clients: config.clients || [],
    jwks: { keys: [key] },
    cookies: { keys: cookieKeys },
    findAccount: (_ctx, id) => account(id),
    claims: {
      openid: ['sub', 'groups'],
      email: ['email', 'email_verified'],
      profile: ['name', 'preferred_username'],
    },
    conformIdTokenClaims: false,
    scopes: ['openid', 'offline_access', 'profile', 'email', 'mcp'],
    pkce: { required: () => true },
    ttl: {
      AccessToken: 120,
      AuthorizationCode: 60,
      IdToken: 120,
      Interaction: 600,
      Session: 600,
      Grant: 600,
      RefreshToken: 600,
      ...(config.ttl || {}),
    },
    features: {
      devInteractions: { enabled: true },
      registration: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: (_ctx, _client, oneOf) => oneOf,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource) => ({
          scope: 'mcp',
          audience: resource,
          accessTokenTTL: (config.ttl || {}).AccessToken || 120,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        }),
      },
    },
    extraTokenClaims: (_ctx, token) => {
      if (token.kind !== 'AccessToken' || !token.accountId) return undefined;
      return { groups: users[token.accountId] || [] };
    },
    // A test provider: consent is given automatically, for what the request asks.
    loadExistingGrant: async (ctx) => {
      const { client, params, session } = ctx.oidc;
      if (!session?.accountId) return undefined;
      const grantId = ctx.oidc.result?.consent?.grantId || session.grantIdFor(client.clientId);
      let grant = grantId ? await ctx.oidc.provider.Grant.find(grantId) : undefined;
      if (!grant) {
        grant = new ctx.oidc.provider.Grant({ accountId: session.accountId, clientId: client.clientId });
      }
      grant.addOIDCScope('openid offline_access profile email');
      grant.addOIDCClaims(['sub', 'groups', 'email', 'email_verified', 'name', 'preferred_username']);
      for (const resource of asList(params.resource)) {
        grant.addResourceScope(resource, 'mcp');
      }
      await grant.save();
      return grant;
    },
  });
  provider.on('server_error', (_ctx, error) => console.error('server_error', error));
  return provider;
}

let current = build(freshKey());
let handler = current.callback();

const server = createServer((req, res) => {
  if (req.url === '/_test/rotate-keys' && req.method === 'POST') {
    if (req.headers.authorization !== `Bearer ${config.admin_key}` || !config.admin_key) {
      res.writeHead(403, { 'content-type': 'text/plain' });
      res.end('admin key required');
      return;
    }
    const key = freshKey();
    current = build(key);
    handler = current.callback();
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kid: key.kid }));
    return;
  }
  handler(req, res);
});

server.listen(port, '127.0.0.1', () => {
  console.log(`oidc-provider ${issuer} ready`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
