// Package sso signs people in with the organisation's OpenID Connect
// provider. It owns the relying party's side of the protocol: discovery
// of the provider, whose signing keys are cached and follow rotation
// (go-oidc's remote key set fetches the keys again for a key id it does
// not know); the authorization code flow with PKCE, whose state, nonce
// and code verifier travel in a short-lived cookie that is encrypted and
// authenticated with a key that lives only in this process; verification
// of ID tokens (signature, issuer, audience, expiry and, at login, nonce);
// the map from the provider's groups to roles (RoleMap); the refresh of a
// session's ID token, which re-checks its role; ID tokens as API bearer
// credentials (VerifyBearer); and the provider's end-session URL.
//
// Roles are names here ("view", "edit", "admin", ordered), so that the
// package stays below the server: it must not import backend (the
// dashboard's backend/ui and cmd/rezuscloud turn its answers into
// identities and sessions), and it must never log, return in an error or
// store a token, a code, a client secret or a verifier.
package sso
