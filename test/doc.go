// Package test holds end-to-end tests that run the real binaries against
// real git servers, the real tofu binary and real HTTP on loopback.
package test
