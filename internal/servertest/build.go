package servertest

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// builds holds the binaries Build made in this process, by package, in
// one temporary directory.
var builds struct {
	mu   sync.Mutex
	dir  string
	made map[string]*build
}

type build struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the rezuscloud binary under test: $REZUSCLOUD_BIN when
// set, else cmd/rezuscloud built once per test process.
func Binary(tb TB) string { return Build(tb, "./cmd/rezuscloud", "REZUSCLOUD_BIN") }

// CLI returns the rezusctl binary under test: $REZUSCTL_BIN when set, else
// cmd/rezusctl built once per test process.
func CLI(tb TB) string { return Build(tb, "./cmd/rezusctl", "REZUSCTL_BIN") }

// Build returns the binary of the module's main package pkg ("./cmd/x"):
// the file that the variable env names when it is set, else pkg built
// once per test process as a release is built (CGO off, -trimpath), into
// a directory that RemoveBuilds removes. Binaries built by one test
// process share a directory, named like their packages.
func Build(tb TB, pkg, env string) string {
	tb.Helper()
	if p := os.Getenv(env); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			tb.Fatalf("$%s: %v", env, err)
		}
		return abs
	}
	b, err := buildOf(pkg)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	b.once.Do(func() {
		bin := filepath.Join(builds.dir, path.Base(pkg))
		cmd := exec.Command("go", "build", "-trimpath", "-o", bin, pkg)
		cmd.Dir = testenv.Root()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
			return
		}
		b.path = bin
	})
	if b.err != nil {
		tb.Fatalf("%v", b.err)
	}
	return b.path
}

// buildOf returns the build of pkg, making the directory of builds first.
func buildOf(pkg string) (*build, error) {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "rezuscloud-servertest-")
		if err != nil {
			return nil, err
		}
		builds.dir, builds.made = dir, map[string]*build{}
	}
	b := builds.made[pkg]
	if b == nil {
		b = &build{}
		builds.made[pkg] = b
	}
	return b, nil
}

// RemoveBuilds removes the binaries that Build made. A package that runs
// the binaries calls it from TestMain, after m.Run.
func RemoveBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
		builds.dir, builds.made = "", nil
	}
}
