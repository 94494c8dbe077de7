// Package version holds the build's version, set at link time by the
// Makefile. It imports nothing.
package version

// Version is the release or git description of this build; "dev" when built
// without the Makefile.
var Version = "dev"
