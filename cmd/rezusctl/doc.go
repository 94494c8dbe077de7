// Command rezusctl is the command-line client of a RezusCloud server: it
// reads the API through internal/client (get, describe, status, watch,
// logs, download), asks for reconciles, and validates or diffs a checkout
// locally with the server's own schema and render packages.
//
// It speaks to a server only through the API's wire shapes (backend/api)
// and must not import the server's own packages: backend, reconciler,
// store or cmd/rezuscloud. It prints no token, not even with --verbose.
package main
