// Package layering holds the rules of the house as tests, so that an
// arrow that runs the wrong way, or a status written outside its owner,
// fails `go test` where it is added:
//
//   - store and its engines import nothing of backend, reconciler,
//     render, cmd or sources: the HTTP API and the reconciler are built
//     on the store, never the other way round;
//   - reconciler and every package under it reach backend only through
//     its wire shapes, backend/api: the ports the API calls are declared
//     in backend and implemented by the reconciler structurally, with
//     the types of their signatures in leaf packages;
//   - internal/backoff, a leaf, imports nothing of the module.
//   - status has one owner, reconciler/status (TestStatusOwner): no other
//     code stores a Tenant, NodeGroup, Machine or ConfigPatch, and no
//     other code of the reconciler makes or sets a condition.
//   - the groups of internal/ (see internal/doc.go) keep to their places:
//     the leaf utilities import no simulator, no API client, no test kit
//     and nothing of the server above them (backend, reconciler, render,
//     sources, store, cmd); the simulators import neither the reconciler
//     nor backend, store, sources or cmd; the API client imports no
//     server package but backend's wire shapes; and only tests,
//     benchmarks and the test kits themselves import a test kit;
//   - every package under internal/ is in one of its groups
//     (TestInternalGroups), so that a new one is placed on purpose.
//
// The import rules read the imports of the module's Go files (go/parser,
// no network) and follow them through the module, so an import by way of
// another package of the module breaks them too; the status rule reads
// their syntax. They hold for the code a package builds from; its tests
// may import and set up more (the reconciler's tests boot a real state
// backend).
package layering
