package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// serveFlags returns the flag names that `rezuscloud serve` defines, read
// from its source (fs.XxxVar(&field, "name", ...) in cmd/rezuscloud).
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("../cmd/rezuscloud/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("source of rezuscloud serve: %v", err)
	}
	def := regexp.MustCompile(`fs\.\w+Var\(&[\w.]+, "([a-z0-9-]+)"`)
	flags := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range def.FindAllSubmatch(b, -1) {
			flags[string(m[1])] = true
		}
	}
	flags["config"] = true // defined by its constant, configFlag
	if !flags["data"] || !flags["tokens-file"] {
		t.Fatalf("found no serve flags in %v: %v", files, flags)
	}
	return flags
}

// simulatorFlags are the settings of the simulated cloud, which tests and
// the demo run and a deployment never does.
var simulatorFlags = map[string]bool{"sim-cloud": true, "sim-dir": true, "sim-timings": true, "sim-openstack": true, "sim-openstack-addresses": true, "sim-kube-bin": true}

// checkServeFlags fails for every --flag in args that serve does not have,
// and for every setting of the simulated cloud.
func checkServeFlags(t *testing.T, where string, args []string) {
	t.Helper()
	known := serveFlags(t)
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch {
		case !strings.HasPrefix(a, "--") || !known[name]:
			t.Errorf("%s: %q is not a flag of rezuscloud serve", where, a)
		case simulatorFlags[name]:
			t.Errorf("%s: %q runs the simulated cloud, which is for tests and the demo", where, a)
		}
	}
}

// checkEnv fails for every REZUSCLOUD_ variable in env (NAME=value) that
// is neither a serve flag's variable nor one of the git credentials, and
// for every setting of the simulated cloud.
func checkEnv(t *testing.T, where string, env []string) {
	t.Helper()
	known := serveFlags(t)
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "REZUSCLOUD_")), "_", "-")
		switch {
		case !strings.HasPrefix(name, "REZUSCLOUD_") || !(known[flag] || strings.HasPrefix(name, "REZUSCLOUD_GIT_")):
			t.Errorf("%s: %s is not a setting of rezuscloud serve", where, name)
		case simulatorFlags[flag]:
			t.Errorf("%s: %s runs the simulated cloud, which is for tests and the demo", where, name)
		}
	}
}
