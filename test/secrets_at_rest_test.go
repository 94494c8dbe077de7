package test

import (
	"bytes"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/schema"
)

// atRestPassphrase encrypts the states of TestSecretsAtRest.
const atRestPassphrase = "at-rest-passphrase-0123456789"

// pemMarkers returns what a PEM header looks like in a file: plain, base64
// encoded at each of the three offsets a base64 encoder can meet it at,
// and base64 encoded twice (user data that is the base64 of a config that
// holds base64 keys).
func pemMarkers() []string {
	const header = "-----BEGIN"
	once := base64Forms([]byte(header))
	out := append([]string{header}, once...)
	for _, m := range once {
		out = append(out, base64Forms([]byte(m))...)
	}
	return out
}

// base64Forms returns the parts of the base64 encoding of s that do not
// depend on the bytes around s, for each offset of s modulo 3.
func base64Forms(s []byte) []string {
	var out []string
	for pad := 0; pad < 3; pad++ {
		enc := base64.StdEncoding.EncodeToString(append(bytes.Repeat([]byte{0}, pad), s...))
		// The first group holding a padding byte and the last group,
		// which may end early, depend on the neighbours.
		start := 0
		if pad > 0 {
			start = 4
		}
		end := (pad + len(s)) / 3 * 4
		if end > start {
			out = append(out, enc[start:end])
		}
	}
	return out
}

// atRestHit is a PEM marker found in a file of the data dir.
type atRestHit struct {
	file, marker, what string
}

// walkAtRest calls fn with every regular file under dir, by its path
// relative to dir, but executables (ELF files: the providers tofu
// installs), which are public builds whose PEM parsers carry the header as
// a constant.
func walkAtRest(t *testing.T, dir string, fn func(rel string, b []byte)) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.HasPrefix(b, []byte("\x7fELF")) {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		fn(rel, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// scanAtRest reads every file under dir (see walkAtRest) and returns the
// PEM markers it holds.
func scanAtRest(t *testing.T, dir string) (hits []atRestHit, files int) {
	t.Helper()
	markers := pemMarkers()
	walkAtRest(t, dir, func(rel string, b []byte) {
		files++
		for _, m := range markers {
			if i := bytes.Index(b, []byte(m)); i >= 0 {
				hits = append(hits, atRestHit{file: rel, marker: m, what: atRestKind(b[i:])})
				break
			}
		}
	})
	return hits, files
}

// atRestKind says whether a plain PEM header names a private key, without
// quoting anything after it.
func atRestKind(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	switch {
	case bytes.Contains(line, []byte("PRIVATE KEY")):
		return "private key"
	case bytes.HasPrefix(line, []byte("-----BEGIN")):
		return "PEM block"
	}
	return "base64 of a PEM block"
}

// TestSecretsAtRest runs the server with state encryption on, applies the
// examples, scales a tenant and previews a branch (a plan in a throwaway
// workspace), and then reads every file of the data dir: no PEM block may
// rest there in any form, plain or base64, once the runs are over. Work
// directories keep no plan file, var file or errored.tfstate.
func TestSecretsAtRest(t *testing.T) {
	e := newE2E(t, e2eOptions{
		args: []string{"--preview-refs", "refs/heads/*"},
		env:  []string{"REZUSCLOUD_STATE_PASSPHRASE=" + atRestPassphrase},
	})
	s := e.srv
	e.setCount("production", "workers", 3)
	scaled := e.push("Scale production workers to 3")
	s.waitApplied(scaled)

	e.setCount("staging", "workers", 2)
	branch := e.pushBranch("scale-staging", "Scale staging workers to 2")
	if c := s.previewCommit(branch); c.Status.Phase != schema.CommitSucceeded {
		t.Fatalf("preview of %s: %s, want Succeeded: %s", branch[:12], c.Status.Phase, e2eBrief(c.Status))
	}
	if len(previewRefDirs(t, e.data)) == 0 {
		t.Fatal("the preview left no workspace: the test does not cover previews")
	}

	hits, files := scanAtRest(t, e.data)
	if files < 10 {
		t.Fatalf("read only %d files in the data dir %s", files, e.data)
	}
	for _, h := range hits {
		t.Errorf("%s holds a %s at rest (marker %q)", h.file, h.what, h.marker)
	}
	for _, pattern := range []string{"work/*/*.tfplan", "work/*/*.tfvars.json", "work/*/errored.tfstate", "previews/*/*/*.tfvars.json", "previews/*/*/*.tfplan"} {
		m, _ := filepath.Glob(filepath.Join(e.data, pattern))
		if len(m) > 0 {
			t.Errorf("left between runs: %s", strings.Join(m, ", "))
		}
	}
	// The workspaces are still there to show and to diff against.
	if _, err := os.Stat(filepath.Join(e.data, "work", "production", "main.tf.json")); err != nil {
		t.Errorf("production's applied workspace: %v", err)
	}
}
