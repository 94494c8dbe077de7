package webhook

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestSecretFrom(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := envOf(map[string]string{SecretEnv: "from-env"})
	for _, tc := range []struct {
		name string
		file string
		env  func(string) string
		want string
		err  string
	}{
		{"env", "", env, "from-env", ""},
		{"env with newline", "", envOf(map[string]string{SecretEnv: "from-env\n"}), "from-env", ""},
		{"file wins over env", write("a", "from-file\n"), env, "from-file", ""},
		{"one newline only", write("b", "two\n\n"), env, "two\n", ""},
		{"crlf", write("c", "dos\r\n"), env, "dos", ""},
		{"no newline", write("d", "bare"), env, "bare", ""},
		{"spaces kept", write("e", " padded \n"), env, " padded ", ""},
		{"empty file", write("f", ""), env, "", "is empty"},
		{"file of one newline", write("g", "\n"), env, "", "is empty"},
		{"missing file", filepath.Join(dir, "nope"), env, "", "no such file"},
		{"huge file", write("h", strings.Repeat("k", maxSecretFile+1)), env, "", "over 65536 bytes"},
		{"nothing", "", envOf(nil), "", "no webhook secret"},
		{"empty env", "", envOf(map[string]string{SecretEnv: "\n"}), "", "no webhook secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SecretFrom(tc.file, tc.env)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if tc.file != "" && !strings.Contains(err.Error(), tc.file) {
					t.Errorf("error %q does not name the file", err)
				}
				if got != nil {
					t.Errorf("secret %q returned with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("secret %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := SecretFrom("", envOf(nil)); !errors.Is(err, ErrNoSecret) {
		t.Errorf("unconfigured: %v, want ErrNoSecret", err)
	}
	if _, err := SecretFrom(write("i", ""), envOf(nil)); errors.Is(err, ErrNoSecret) {
		t.Errorf("an empty file is a broken configuration, not a missing one: %v", err)
	}
}
