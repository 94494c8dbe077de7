// Package test holds end-to-end tests that run the real binaries against
// real git servers, the real tofu binary and real HTTP on loopback. They
// start the server through internal/servertest and drive it as its users
// do (its API, rezusctl, tofu and terraform against its state backend, the
// dashboard in Chromium), and read the simulated world to check what it
// did.
package test
