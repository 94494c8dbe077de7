package sources

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/rezuscloud/rezuscloud/internal/gittest"
)

const (
	httpUser = "alice"
	httpPass = "hunter2-very-secret-token"
)

func seedHTTP(t *testing.T) (*gittest.HTTP, string) {
	t.Helper()
	h := gittest.NewHTTP(t, httpUser, httpPass)
	h.CreateBare("repo.git")
	w := gittest.NewWorkdir(t, h.AuthURL("repo.git"))
	w.Write("t.yaml", "kind: Tenant\n")
	sha := w.Commit("first")
	w.Push()
	return h, sha
}

func TestHTTPAuthGood(t *testing.T) {
	h, sha := seedHTTP(t)
	g := newTestGit(t, GitOptions{URL: h.URL("repo.git"), Auth: Auth{Username: httpUser, Password: httpPass}})
	snap, _ := mustFetch(t, g)
	if snap.Revision != sha {
		t.Fatalf("Revision = %s, want %s", snap.Revision, sha)
	}
	if got := readFile(t, snap.FS, "t.yaml"); got != "kind: Tenant\n" {
		t.Fatalf("t.yaml = %q", got)
	}
	if _, changed := mustFetch(t, g); changed {
		t.Fatal("second poll changed")
	}
	if g.Status().Fetches != 1 {
		t.Fatalf("Fetches = %d", g.Status().Fetches)
	}
}

// Credentials in the URL are used, and kept out of the snapshot, the
// status, the logs and the clone on disk.
func TestHTTPAuthInURL(t *testing.T) {
	h, sha := seedHTTP(t)
	logger, logs := testLogger(t)
	g := newTestGit(t, GitOptions{URL: h.AuthURL("repo.git"), Logger: logger})
	snap, _ := mustFetch(t, g)
	if snap.Revision != sha {
		t.Fatalf("Revision = %s", snap.Revision)
	}
	if snap.Source != h.URL("repo.git") || g.Status().URL != h.URL("repo.git") {
		t.Fatalf("Source = %q, Status.URL = %q; want %q", snap.Source, g.Status().URL, h.URL("repo.git"))
	}
	if strings.Contains(logs.String(), httpPass) {
		t.Fatal("the password is in the log")
	}
	assertNotInFiles(t, g.CloneDir(), httpPass)
}

func assertNotInFiles(t *testing.T, dir, secret string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("the secret is written to %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("no files under %s", dir)
	}
}

func TestHTTPAuthBad(t *testing.T) {
	h, _ := seedHTTP(t)
	const wrong = "wrong-password-xyz"
	for _, c := range []struct {
		name string
		auth Auth
		who  string
	}{
		{"wrong password", Auth{Username: httpUser, Password: wrong}, `as "alice"`},
		{"no credentials", Auth{}, "anonymously"},
	} {
		t.Run(c.name, func(t *testing.T) {
			logger, logs := testLogger(t)
			g := newTestGit(t, GitOptions{URL: h.URL("repo.git"), Auth: c.auth, Logger: logger, PollInterval: 20 * time.Millisecond})
			_, _, err := g.Fetch(context.Background())
			if !errors.Is(err, ErrAuth) {
				t.Fatalf("Fetch = %v, want ErrAuth", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "authentication failed") || !strings.Contains(msg, c.who) || !strings.Contains(msg, h.URL("repo.git")) {
				t.Fatalf("error %q does not say that authentication failed %s at the URL", msg, c.who)
			}
			// Run logs the failures; none of it shows the password.
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- g.Run(ctx, make(chan Snapshot)) }()
			waitFor(t, "a logged failure", func() bool { return strings.Contains(logs.String(), "poll failed") })
			cancel()
			<-done
			for _, text := range []string{msg, g.Status().LastError, logs.String()} {
				if strings.Contains(text, wrong) || strings.Contains(text, httpPass) {
					t.Fatalf("a password leaked: %q", text)
				}
			}
			if !strings.Contains(logs.String(), "authentication failed") {
				t.Fatalf("log does not say why: %s", logs.String())
			}
		})
	}
}

func TestListRefs(t *testing.T) {
	d := gittest.NewDaemon(t)
	w, sha := seedRepo(t, d)
	w.Tag("v1", "annotated")
	w.Run("checkout", "--quiet", "-b", "feature/x")
	feature := w.Commit("on a feature branch")
	w.Push()

	refs, err := ListRefs(context.Background(), d.URL("repo.git"), Auth{})
	if err != nil {
		t.Fatal(err)
	}
	tagObj := gittest.Git(t, d.Path("repo.git"), "rev-parse", "refs/tags/v1")
	want := map[string]string{"refs/heads/main": sha, "refs/heads/feature/x": feature, "refs/tags/v1": tagObj}
	if len(refs) != len(want) {
		t.Fatalf("refs = %v, want %v", refs, want)
	}
	for k, v := range want {
		if refs[k] != v {
			t.Fatalf("refs[%s] = %s, want %s (all: %v)", k, refs[k], v, refs)
		}
	}

	h, _ := seedHTTP(t)
	if _, err := ListRefs(context.Background(), h.URL("repo.git"), Auth{Username: "alice", Password: "nope"}); !errors.Is(err, ErrAuth) {
		t.Fatalf("ListRefs with bad credentials = %v", err)
	}
	d.Stop()
	if _, err := ListRefs(context.Background(), d.URL("repo.git"), Auth{}); err == nil {
		t.Fatal("ListRefs of a stopped server succeeded")
	}
}

func TestAuthRedaction(t *testing.T) {
	key := newSSHKey(t, "")
	a := Auth{Username: "bob", Password: "pa55w0rd", SSHKey: key, SSHKeyPassphrase: "s3cr3tphr4se", KnownHostsFile: "/etc/kh"}
	opts := GitOptions{URL: "https://example.com/r.git", Auth: a}

	var logBuf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logBuf, nil))
	logger.Info("auth", "auth", a)
	slog.New(slog.NewTextHandler(&logBuf, nil)).Info("auth", "auth", a)

	js, err := json.Marshal(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"username":"bob"`) || !strings.Contains(string(js), `"password":"[redacted]"`) {
		t.Fatalf("JSON = %s", js)
	}
	outputs := []string{
		string(js),
		a.String(), a.GoString(),
		fmt.Sprintf("%v", a), fmt.Sprintf("%+v", a), fmt.Sprintf("%#v", a), fmt.Sprint(a),
		fmt.Sprintf("%v", opts), fmt.Sprintf("%+v", opts), fmt.Sprintf("%+v", &opts),
		logBuf.String(),
	}
	for _, out := range outputs {
		for _, secret := range []string{"pa55w0rd", "s3cr3tphr4se", "PRIVATE KEY", string(key[40:60])} {
			if strings.Contains(out, secret) {
				t.Fatalf("secret %q shown in %q", secret, out)
			}
		}
	}
	if !strings.Contains(a.String(), "bob") || !strings.Contains(a.String(), "[redacted]") {
		t.Fatalf("String() = %q: want the user and a redaction mark", a.String())
	}
	if !strings.Contains(logBuf.String(), `"username":"bob"`) {
		t.Fatalf("log = %s", logBuf.String())
	}
	if (Auth{}).String() != "Auth{anonymous}" || !(Auth{}).IsZero() || a.IsZero() {
		t.Fatal("zero Auth")
	}
}

func TestAuthFromEnv(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}

	a, err := authFromEnv(env(map[string]string{EnvUsername: "u", EnvPassword + "_FILE": write("pw", "from-file\n")}))
	if err != nil || a.Username != "u" || a.Password != "from-file" {
		t.Fatalf("password file: %+v, %v", a, err)
	}
	a, err = authFromEnv(env(map[string]string{EnvToken: "tok"}))
	if err != nil || a.Password != "tok" || a.Username != "" {
		t.Fatalf("token: %+v, %v", a, err)
	}
	a, err = authFromEnv(env(nil))
	if err != nil || !a.IsZero() {
		t.Fatalf("empty environment: %+v, %v", a, err)
	}

	key := newSSHKey(t, "")
	kh := write("known_hosts", "")
	a, err = authFromEnv(env(map[string]string{EnvSSHKey + "_FILE": write("id", string(key)), EnvKnownHostsFile: kh}))
	if err != nil || !bytes.Equal(a.SSHKey, bytes.TrimSuffix(key, []byte("\n"))) || a.KnownHostsFile != kh {
		t.Fatalf("ssh key file: %v", err)
	}
	encrypted := newSSHKey(t, "phrase")
	a, err = authFromEnv(env(map[string]string{EnvSSHKey: string(encrypted), EnvSSHKeyPassphrase + "_FILE": write("phrase", "phrase\n")}))
	if err != nil || a.SSHKeyPassphrase != "phrase" {
		t.Fatalf("encrypted key with passphrase: %v", err)
	}

	bad := []struct {
		vars map[string]string
		want []string
	}{
		{map[string]string{EnvPassword: "a", EnvPassword + "_FILE": "/x"}, []string{EnvPassword, "both set"}},
		{map[string]string{EnvPassword: "a", EnvToken: "b"}, []string{EnvToken, "both set"}},
		{map[string]string{EnvPassword + "_FILE": filepath.Join(dir, "missing")}, []string{EnvPassword + "_FILE", "missing"}},
		{map[string]string{EnvPassword + "_FILE": write("empty", "")}, []string{"is empty"}},
		{map[string]string{EnvSSHKey: "not a key"}, []string{EnvSSHKey, "parse private key"}},
		{map[string]string{EnvSSHKey: string(encrypted)}, []string{EnvSSHKey, "encrypted", "no passphrase"}},
		{map[string]string{EnvSSHKey: string(encrypted), EnvSSHKeyPassphrase: "wrong"}, []string{EnvSSHKey}},
		{map[string]string{EnvKnownHostsFile: filepath.Join(dir, "nope")}, []string{EnvKnownHostsFile}},
	}
	for _, c := range bad {
		_, err := authFromEnv(env(c.vars))
		if err == nil {
			t.Fatalf("authFromEnv(%v) succeeded", c.vars)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("authFromEnv(%v) = %q, want it to mention %q", c.vars, err, w)
			}
		}
		for _, v := range c.vars {
			if len(v) > 2 && !strings.HasPrefix(v, "/") && strings.Contains(err.Error(), v) {
				t.Fatalf("error %q shows the value %q", err, v)
			}
		}
	}

	t.Setenv(EnvUsername, "envuser")
	t.Setenv(EnvPassword, "envpass")
	a, err = AuthFromEnv()
	if err != nil || a.Username != "envuser" || a.Password != "envpass" {
		t.Fatalf("AuthFromEnv: %+v, %v", a, err)
	}
}

func newSSHKey(t *testing.T, passphrase string) []byte {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var block *pem.Block
	if passphrase == "" {
		block, err = ssh.MarshalPrivateKey(priv, "test")
	} else {
		block, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "test", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block)
}

func TestSSHAuth(t *testing.T) {
	s := gittest.NewSSH(t)
	s.CreateBare("repo.git")
	w := gittest.NewWorkdir(t, "")
	w.Write("t.yaml", "kind: Tenant\n")
	sha := w.Commit("first")
	w.Run("push", "--quiet", s.Path("repo.git"), "HEAD:refs/heads/main")

	good := Auth{SSHKey: s.ClientKey(), KnownHostsFile: s.KnownHostsFile()}
	g := newTestGit(t, GitOptions{URL: s.URL("repo.git"), Auth: good})
	snap, _ := mustFetch(t, g)
	if snap.Revision != sha || readFile(t, snap.FS, "t.yaml") != "kind: Tenant\n" {
		t.Fatalf("over SSH: %+v", snap)
	}
	if _, changed := mustFetch(t, g); changed || g.Status().Fetches != 1 {
		t.Fatalf("second poll: changed = %v, Fetches = %d", changed, g.Status().Fetches)
	}

	// Another key is refused, and the error says so.
	other := Auth{SSHKey: newSSHKey(t, ""), KnownHostsFile: s.KnownHostsFile()}
	g = newTestGit(t, GitOptions{URL: s.URL("repo.git"), Auth: other})
	if _, _, err := g.Fetch(context.Background()); !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), `as "git"`) {
		t.Fatalf("wrong key: %v", err)
	}

	// A host key that known_hosts does not hold, or holds differently, is
	// refused before any credentials are sent.
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	g = newTestGit(t, GitOptions{URL: s.URL("repo.git"), Auth: Auth{SSHKey: s.ClientKey(), KnownHostsFile: empty}})
	if _, _, err := g.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "not in known_hosts") {
		t.Fatalf("unknown host: %v", err)
	}
	other2 := gittest.NewSSH(t)
	kh, _ := os.ReadFile(other2.KnownHostsFile())
	host := strings.Fields(string(kh))[0]
	mine, _ := os.ReadFile(s.KnownHostsFile())
	wrong := filepath.Join(dir, "wrong")
	os.WriteFile(wrong, []byte(strings.Replace(string(kh), host, strings.Fields(string(mine))[0], 1)), 0o600)
	g = newTestGit(t, GitOptions{URL: s.URL("repo.git"), Auth: Auth{SSHKey: s.ClientKey(), KnownHostsFile: wrong}})
	if _, _, err := g.Fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "does not match known_hosts") {
		t.Fatalf("changed host key: %v", err)
	}
}
