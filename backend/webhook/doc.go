// Package webhook receives push notifications from git forges and turns
// them into an immediate fetch of the repository the server follows.
//
// Handler serves three hooks under Prefix:
//
//   - POST /hooks/github for GitHub, Gitea and Forgejo. The body is signed
//     with HMAC-SHA256 and the webhook secret, sent as
//     "X-Hub-Signature-256: sha256=<hex>". Push events trigger; ping
//     answers 200 pong; other events answer 202 and trigger nothing.
//   - POST /hooks/gitlab for GitLab. The X-Gitlab-Token header must equal
//     the secret. "Push Hook" and "Tag Push Hook" events trigger; other
//     events answer 202 and trigger nothing.
//   - POST /hooks/generic for anything else, such as a CI job or a script.
//     The body is signed like GitHub's. It may be empty, arbitrary bytes,
//     or a JSON object {"repository": "...", "ref": "..."} naming what
//     was pushed.
//
// A hook is trusted only through its signature or token: the handler is
// mounted without API token authentication. A request without a valid
// signature answers 401 and triggers nothing. Bodies over MaxBodyBytes
// answer 413; other methods than POST answer 405; unknown hooks 404. Every
// error body has the shape of package api. Without a secret the handler
// refuses every hook with 503 and says how to configure one: webhooks
// never run unsigned. The secret comes from the environment or a file
// (see SecretFrom), never from a command-line value.
//
// Only the repository URL and the ref are taken from a payload; the
// commit is always read from git itself, so a forged or stale payload can
// at worst cause one extra fetch. The handler hands the URL and ref to a
// Trigger and answers at once. It never waits for a fetch: coalescing a
// flood of hooks into one fetch is the job of the source behind the
// Trigger (the git source's trigger is a channel of one).
//
// The package must not import anything of the project but package api,
// and must not fetch, parse manifests or touch the store itself.
package webhook
