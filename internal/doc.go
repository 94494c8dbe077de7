// Package internal holds the packages that the server, rezusctl, the
// tests and the benchmarks share and that no other module may import. They
// fall into four groups, and internal/layering's tests hold every package
// to its group's place (TestImportRules, TestInternalGroups):
//
//   - Leaf utilities, which any part of the server may use and which
//     build only on schema and on each other: atomicfile, backoff, commitmsg,
//     labels, machinelog, metrics, modeldiff, preview, redact, sopsfile
//     (SOPS-encrypted manifests, decrypted with age), supervise (the
//     server's first process in a container), tfcli, version and window. They import no simulator, no API client and
//     nothing of the server above them (backend, reconciler, render,
//     sources, store, cmd).
//   - The simulators, the simulated world of tests and the demo: sim (the
//     sim cloud's store of machines), sim/talosnode (simulated Talos
//     nodes) and sim/openstack (a simulated OpenStack API). They import
//     neither the reconciler nor backend, store, sources or cmd, and the
//     server runs them only with --sim-cloud.
//   - The API client, client, which rezusctl and tests use. It imports no
//     server package but backend's wire shapes (backend/api).
//   - Test kits, for tests and benchmarks only: gittest (git servers on
//     loopback), testenv (the real tofu, provider mirror and Kubernetes binaries), servertest
//     (the real server, started for a test), kubetest (a tenant's real
//     Kubernetes control plane, started for a test), etcdtest (a real etcd
//     cluster in the test's process), oidctest (a real OpenID Connect
//     provider in the test's process), manifestfleet (fleets of
//     manifests) and layering (these rules). Only tests, benchmarks and
//     the kits themselves import them.
package internal
