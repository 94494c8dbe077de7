// Command rezuscloud is the server: `serve` wires the store, the state
// backend, the API, the dashboard, the git sources, the reconciler and its
// Talos plane together from flags, the environment and a config file;
// `demo` lays out the examples and serves them on the simulated cloud;
// `token create` makes an API token's line; `store backup` and `store
// restore` copy the store, through a running server or from a data dir
// where none runs, and put a copy in place; `sim serve` runs the simulated
// world as a process of its own; `version` says which build runs.
//
// It owns the settings and the wiring, and nothing else: what the server
// does lives in the packages it wires. The simulated cloud (internal/sim)
// is opened here only under --sim-cloud or by `sim serve`, never by
// default; a server on --sim-world uses one that another process runs.
package main
