// Package sim is the simulated cloud's machine store: the record format of
// one simulated machine and the directory layout that holds them. The
// rezussim provider writes records here; the server's status collector reads
// them to simulate boot stages.
//
// Layout: one file per machine, <dir>/<id>.json (mode 0600, dir 0700), each
// written atomically (package atomicfile), so a reader never sees half a
// record. Writers serialise on <dir>/.lock, which also makes
// address allocation safe across provider processes sharing a directory.
// Readers need no lock. <dir>/fail-next (FaultsFile), when present,
// makes the next machine changes fail, for tests.
//
// A record never holds a machine's user data, only its SHA-256. Addresses
// come from the documentation ranges (RFC 5737) and nothing ever dials them.
// This package must not import anything else of the project but
// internal/atomicfile.
package sim
