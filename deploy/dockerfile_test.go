package deploy

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// parseDockerfile parses path with BuildKit's own parser and returns its
// stages and the defaults of its global ARGs.
func parseDockerfile(t *testing.T, path string) ([]instructions.Stage, map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	stages, meta, err := instructions.Parse(res.AST, nil)
	if err != nil {
		t.Fatalf("instructions of %s: %v", path, err)
	}
	args := map[string]string{}
	for _, a := range meta {
		for _, kv := range a.Args {
			if kv.Value != nil {
				args[kv.Key] = *kv.Value
			}
		}
	}
	return stages, args
}

// pinned matches an image with an explicit version tag, optionally with a
// digest: golang:1.26.8-bookworm, debian:12.12-slim@sha256:...
var pinned = regexp.MustCompile(`^[a-z0-9./-]+:[0-9][A-Za-z0-9._-]*(@sha256:[0-9a-f]{64})?$`)

func TestDockerfile(t *testing.T) {
	stages, args := parseDockerfile(t, "Dockerfile")
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a runtime stage", len(stages))
	}
	names := map[string]bool{}
	for _, s := range stages {
		base := s.BaseName
		if m := regexp.MustCompile(`^\$\{?(\w+)\}?$`).FindStringSubmatch(base); m != nil {
			base = args[m[1]]
		}
		if !names[base] && !pinned.MatchString(base) {
			t.Errorf("stage %q: base image %q is not pinned to a version tag", s.Name, base)
		}
		names[s.Name] = true
		checkNoRemoteAdd(t, s)
	}
	build, run := stages[0], stages[len(stages)-1]
	for _, want := range []string{"scripts/tools.sh", "make build"} {
		if !runs(build, want) {
			t.Errorf("build stage does not run %s", want)
		}
	}
	copied := checkRuntimeCopies(t, run, build.Name)
	checkUser(t, run)
	checkRuntimeSettings(t, run)
	entry := entrypoint(t, run)
	want := []string{"/usr/local/bin/rezuscloud", "supervise", "--", "/usr/local/bin/rezuscloud", "serve"}
	if len(entry) < len(want) || !slices.Equal(entry[:len(want)], want) {
		t.Fatalf("entrypoint %q, want %q: the server under the supervisor, so that tofu outlives its crash", entry, want)
	}
	entry = entry[len(want)-2:]
	flags := flagValues(entry[2:])
	checkServeFlags(t, "ENTRYPOINT", entry[2:])
	for _, f := range []string{"tofu", "provider-mirror"} {
		if !slices.ContainsFunc(copied, func(dst string) bool { return strings.HasPrefix(flags[f]+"/", strings.TrimSuffix(dst, "/")+"/") }) {
			t.Errorf("--%s=%s is not under a directory copied from the build stage (%v)", f, flags[f], copied)
		}
	}
	if !strings.HasPrefix(flags["data"], "/var/lib/rezuscloud/") {
		t.Errorf("--data=%s is not on the volume /var/lib/rezuscloud", flags["data"])
	}
}

func checkNoRemoteAdd(t *testing.T, s instructions.Stage) {
	t.Helper()
	for _, c := range s.Commands {
		if add, ok := c.(*instructions.AddCommand); ok {
			for _, src := range add.SourcePaths {
				if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
					t.Errorf("stage %q: ADD from %s: fetch nothing unpinned at build time", s.Name, src)
				}
			}
		}
	}
}

// checkRuntimeCopies checks that the runtime stage takes the binaries and
// the provider mirror from the build stage, and returns the destinations.
func checkRuntimeCopies(t *testing.T, run instructions.Stage, build string) []string {
	t.Helper()
	var dsts, srcs []string
	for _, c := range run.Commands {
		if cp, ok := c.(*instructions.CopyCommand); ok && cp.From == build {
			dsts = append(dsts, cp.DestPath)
			srcs = append(srcs, cp.SourcePaths...)
		}
	}
	all := strings.Join(srcs, " ")
	for _, want := range []string{"/out/bin/", "providers"} {
		if !strings.Contains(all, want) {
			t.Errorf("runtime stage copies %q from %s, nothing of %s", srcs, build, want)
		}
	}
	return dsts
}

// checkUser: the runtime stage's last USER is a numeric, non-root uid, so
// that runAsNonRoot can verify it.
func checkUser(t *testing.T, run instructions.Stage) {
	t.Helper()
	var user string
	for _, c := range run.Commands {
		if u, ok := c.(*instructions.UserCommand); ok {
			user = u.User
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("runtime USER %q, want a numeric non-root uid", user)
	}
}

func checkRuntimeSettings(t *testing.T, run instructions.Stage) {
	t.Helper()
	var volumes, ports []string
	for _, c := range run.Commands {
		switch c := c.(type) {
		case *instructions.VolumeCommand:
			volumes = append(volumes, c.Volumes...)
		case *instructions.ExposeCommand:
			ports = append(ports, c.Ports...)
		case *instructions.HealthCheckCommand:
			t.Error("HEALTHCHECK in the image: the orchestrator's probes check health")
		}
	}
	if !slices.Contains(volumes, "/var/lib/rezuscloud") {
		t.Errorf("volumes %q, want /var/lib/rezuscloud", volumes)
	}
	if !slices.Contains(ports, "8080") {
		t.Errorf("exposed ports %q, want 8080", ports)
	}
}

func runs(s instructions.Stage, what string) bool {
	for _, c := range s.Commands {
		if r, ok := c.(*instructions.RunCommand); ok && strings.Contains(strings.Join(r.CmdLine, " "), what) {
			return true
		}
	}
	return false
}

func entrypoint(t *testing.T, s instructions.Stage) []string {
	t.Helper()
	var e *instructions.EntrypointCommand
	for _, c := range s.Commands {
		if c, ok := c.(*instructions.EntrypointCommand); ok {
			e = c
		}
	}
	if e == nil {
		t.Fatal("runtime stage has no ENTRYPOINT")
	}
	if e.PrependShell {
		t.Errorf("ENTRYPOINT in shell form: the server would not get SIGTERM as PID 1")
	}
	return e.CmdLine
}

// flagValues maps --name=value arguments to their values.
func flagValues(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			m[k] = v
		}
	}
	return m
}
