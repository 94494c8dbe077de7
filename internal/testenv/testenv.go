// Package testenv locates the real tools that tests drive: the tofu binary,
// the provider mirror that `make build` fills, the Kubernetes control
// plane's binaries that scripts/kube.sh builds, and the S3-compatible
// server that scripts/s3.sh builds (StartS3 runs one on loopback). A test
// that needs one of them fails, with a message that says how to get it,
// rather than skipping: `make test` always provides them. Only tests and benchmarks import it,
// and it imports nothing of the project.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// TB is what the finders need of a test or benchmark; testing.TB has it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Root returns the repository's top directory, found from this file's path.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Tofu returns the path of an OpenTofu binary: $TOFU, or the build that
// scripts/tools.sh caches.
func Tofu(t TB) string {
	t.Helper()
	if p := os.Getenv("TOFU"); p != "" {
		return p
	}
	out, err := exec.Command("bash", filepath.Join(Root(), "scripts", "tools.sh")).Output()
	if err != nil {
		t.Fatalf("no tofu binary: set TOFU or run `make tools` (%v)", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		t.Fatalf("no tofu binary: scripts/tools.sh printed nothing")
	}
	return lines[len(lines)-1]
}

// ProviderMirror returns the filesystem mirror that `make build` fills with
// the simulated provider: $REZUSCLOUD_PROVIDER_MIRROR or bin/providers.
func ProviderMirror(t TB) string {
	t.Helper()
	dir := os.Getenv("REZUSCLOUD_PROVIDER_MIRROR")
	if dir == "" {
		dir = filepath.Join(Root(), "bin", "providers")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("no provider mirror at %s: run `make build`", dir)
	}
	return dir
}
