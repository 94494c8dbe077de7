// Package drift benchmarks drift detection on a fleet of tenants on the
// simulated cloud: the cost of one drift sweep against bare
// `tofu plan -refresh-only` runs in the same workspaces, and the delay a
// sweep adds to an apply that arrives in the middle of it. The benchmarks
// drive the real reconciler, the real tofu binary, the real sim provider
// and a real state backend on loopback.
//
// It holds nothing the product uses: no package of the product may import
// it.
package drift
