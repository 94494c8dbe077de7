package test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

// tfsServer is an in-process rezuscloud server with a tokens file, for
// driving with the real tofu binary.
type tfsServer struct {
	t      *testing.T
	url    string
	tokens map[string]string // name -> secret
	cli    string            // tofu CLI config file
	tofu   string
	logs   *tfsLog
	srv    *backend.Server
}

type tfsLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *tfsLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *tfsLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// tfsTokens writes a tokens file with an edit token for each of two tofu
// users and an admin token, and returns the file and the secrets.
func tfsTokens(t *testing.T) (string, map[string]string) {
	t.Helper()
	return servertest.Tokens(t, map[string]string{"alice": "edit", "bob": "edit", "ops": "admin", "dash": "view"})
}

// tfsCLIConfig writes a tofu CLI config that installs no provider from
// anywhere: terraform_data is built in.
func tfsCLIConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tofu.tfrc")
	cfg := "disable_checkpoint = true\nprovider_installation {\n  direct {\n    exclude = [\"*/*/*\"]\n  }\n}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func tfsStart(t *testing.T, cfg backend.Config) *tfsServer {
	t.Helper()
	s := &tfsServer{t: t, tofu: testenv.Tofu(t), cli: tfsCLIConfig(t), logs: &tfsLog{}}
	cfg.TokensFile, s.tokens = tfsTokens(t)
	cfg.Logger = slog.New(slog.NewTextHandler(s.logs, nil))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", s.logs.String())
		}
	})
	s.srv = servertest.StartBackend(t, cfg, nil)
	s.url = s.srv.URL()
	return s
}

// tfsWork is a tofu work dir whose backend is the server's state name,
// with the credentials of one token.
type tfsWork struct {
	s     *tfsServer
	dir   string
	env   []string
	state string
}

// tfsDataTF returns a .tf.json with terraform_data resources named after
// the keys of inputs, and the empty http backend block. With sleep > 0
// each resource runs a local-exec provisioner that sleeps that long, so
// that an apply holds the lock for a while.
func tfsDataTF(inputs map[string]string, sleep int) string {
	res := map[string]any{}
	for name, in := range inputs {
		r := map[string]any{"input": in}
		if sleep > 0 {
			r["provisioner"] = []any{map[string]any{"local-exec": map[string]any{"command": fmt.Sprintf("sleep %d", sleep)}}}
		}
		res[name] = r
	}
	b, _ := json.MarshalIndent(map[string]any{
		"terraform": map[string]any{"backend": map[string]any{"http": map[string]any{}}},
		"resource":  map[string]any{"terraform_data": res},
	}, "", "  ")
	return string(b)
}

// work returns an initialised work dir.
func (s *tfsServer) work(state, token, tf string, extraEnv ...string) *tfsWork {
	s.t.Helper()
	w := s.newWork(state, token, tf, extraEnv...)
	w.must("init", "-input=false", "-no-color")
	// Credentials travel in the environment only: init must not have
	// written them into the work dir.
	filepath.WalkDir(w.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(s.tokens[token])) {
				s.t.Errorf("tofu wrote the token into %s", p)
			}
		}
		return nil
	})
	return w
}

// newWork returns a work dir that is not initialised yet.
func (s *tfsServer) newWork(state, token, tf string, extraEnv ...string) *tfsWork {
	s.t.Helper()
	dir := s.t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf.json"), []byte(tf), 0o600); err != nil {
		s.t.Fatal(err)
	}
	addr := s.url + "/tfstate/" + state
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + s.t.TempDir(),
		"TF_CLI_CONFIG_FILE=" + s.cli,
		"TF_IN_AUTOMATION=1",
		"CHECKPOINT_DISABLE=1",
		"TF_HTTP_ADDRESS=" + addr,
		"TF_HTTP_LOCK_ADDRESS=" + addr,
		"TF_HTTP_UNLOCK_ADDRESS=" + addr,
		"TF_HTTP_LOCK_METHOD=LOCK",
		"TF_HTTP_UNLOCK_METHOD=UNLOCK",
		"TF_HTTP_USERNAME=" + token,
		"TF_HTTP_PASSWORD=" + s.tokens[token],
		"TF_HTTP_RETRY_WAIT_MIN=0",
		"TF_HTTP_RETRY_WAIT_MAX=1",
	}
	return &tfsWork{s: s, dir: dir, env: append(env, extraEnv...), state: state}
}

func (w *tfsWork) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(w.s.tofu, args...)
	cmd.Dir = w.dir
	cmd.Env = w.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// run runs tofu and returns its stdout, stderr and exit code.
func (w *tfsWork) run(args ...string) (string, string, int) {
	w.s.t.Helper()
	cmd := w.cmd(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			w.s.t.Fatalf("tofu %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return stdout.String(), stderr.String(), code
}

func (w *tfsWork) must(args ...string) string {
	w.s.t.Helper()
	out, errOut, code := w.run(args...)
	if code != 0 {
		w.s.t.Fatalf("tofu %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// request sends one request to the server as token and returns the
// status and body.
func (s *tfsServer) request(method, path, token string, body []byte) (int, []byte) {
	s.t.Helper()
	return tfsRequest(s.t, s.url, method, path, token, s.tokens[token], body)
}

func tfsRequest(t *testing.T, url, method, path, user, secret string, body []byte) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	hr, err := http.NewRequest(method, url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		hr.SetBasicAuth(user, secret)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// tfsStateDoc is the part of a plain TF state the tests read.
type tfsStateDoc struct {
	Serial    uint64 `json:"serial"`
	Lineage   string `json:"lineage"`
	Resources []struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		Instances []struct {
			Attributes struct {
				Input json.RawMessage `json:"input"`
			} `json:"attributes"`
		} `json:"instances"`
	} `json:"resources"`
}

func (s *tfsServer) state(name string) tfsStateDoc {
	s.t.Helper()
	code, body := s.request("GET", "/tfstate/"+name, "ops", nil)
	if code != http.StatusOK {
		s.t.Fatalf("GET state %s: %d %s", name, code, body)
	}
	var doc tfsStateDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		s.t.Fatalf("state %s is not JSON: %v", name, err)
	}
	return doc
}

// inputs returns resource name -> input of a state.
func (d tfsStateDoc) inputs() map[string]string {
	m := map[string]string{}
	for _, r := range d.Resources {
		for _, in := range r.Instances {
			// terraform_data keeps input as a dynamic value:
			// {"value": ..., "type": ...}.
			var v struct{ Value string }
			json.Unmarshal(in.Attributes.Input, &v)
			m[r.Type+"."+r.Name] = v.Value
		}
	}
	return m
}

func (s *tfsServer) versions(name string) api.StateVersionList {
	s.t.Helper()
	code, body := s.request("GET", "/api/v1/tfstate/"+name+"/versions", "ops", nil)
	if code != http.StatusOK {
		s.t.Fatalf("versions of %s: %d %s", name, code, body)
	}
	var list api.StateVersionList
	if err := json.Unmarshal(body, &list); err != nil {
		s.t.Fatal(err)
	}
	return list
}

// waitLock waits until the state is locked and returns the lock.
func (s *tfsServer) waitLock(name string, timeout time.Duration) *api.StateLock {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		code, body := s.request("GET", "/api/v1/tfstate/"+name+"/versions", "ops", nil)
		if code == http.StatusOK {
			var list api.StateVersionList
			if err := json.Unmarshal(body, &list); err == nil && list.Lock != nil {
				return list.Lock
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("state %s was not locked within %v", name, timeout)
	return nil
}

// readmeBlock returns the body of the first block of README.md fenced as
// lang that contains want.
func readmeBlock(t *testing.T, lang, want string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range strings.Split(string(b), "```"+lang+"\n")[1:] {
		if body, _, ok := strings.Cut(part, "```"); ok && strings.Contains(body, want) {
			return body
		}
	}
	t.Fatalf("README.md has no ```%s block with %q", lang, want)
	return ""
}

// TestTFStateReadmeBackendBlock runs README's backend block, exactly as
// README shows it but for the server's URL and the state name, with the
// credential variables README names, through tofu and through terraform
// (when it is installed): init, an apply that holds the lock while it
// runs (the holder is the token's name) and releases it, and a plan that
// finds nothing to do.
func TestTFStateReadmeBackendBlock(t *testing.T) {
	s := tfsStart(t, backend.Config{})
	block := readmeBlock(t, "hcl", `backend "http"`)
	set := map[string]string{}
	for _, line := range strings.Split(block, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			set[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	for key, want := range map[string]string{"address": "", "lock_address": "", "unlock_address": "", "lock_method": `"LOCK"`, "unlock_method": `"UNLOCK"`} {
		if v, ok := set[key]; !ok || (want != "" && v != want) {
			t.Errorf("README's backend block sets %s to %q, want it set (to %s)", key, v, cmp.Or(want, "the state's URL"))
		}
	}
	shell := readmeBlock(t, "sh", "TF_HTTP_PASSWORD")
	for _, v := range []string{"export TF_HTTP_USERNAME=", "export TF_HTTP_PASSWORD="} {
		if !strings.Contains(shell, v) {
			t.Errorf("README's shell block does not %s…", v)
		}
	}
	const main = `resource "terraform_data" "a" {
  input = "one"
  provisioner "local-exec" {
    command = "sleep 1"
  }
}
`
	for _, client := range []string{"tofu", "terraform"} {
		t.Run(client, func(t *testing.T) {
			state := "readme-" + client
			w := &tfsWork{s: s, dir: t.TempDir(), state: state, env: []string{
				"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "TF_CLI_CONFIG_FILE=" + s.cli,
				"TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1",
				"TF_HTTP_USERNAME=alice", "TF_HTTP_PASSWORD=" + s.tokens["alice"],
			}}
			tf := strings.NewReplacer("https://rezuscloud.example.com", s.url, "/tfstate/NAME", "/tfstate/"+state).Replace(block)
			for name, text := range map[string]string{"backend.tf": tf, "main.tf": main} {
				if err := os.WriteFile(filepath.Join(w.dir, name), []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			bin, run := s.tofu, w.must
			if client == "terraform" {
				if _, err := os.Stat(hbTerraform); err != nil {
					t.Skipf("no terraform at %s: %v", hbTerraform, err)
				}
				bin, run = hbTerraform, w.mustTerraform
			}
			run("init", "-input=false", "-no-color")
			filepath.WalkDir(w.dir, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return nil
				}
				if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(s.tokens["alice"])) {
					t.Errorf("%s wrote the token into %s", client, p)
				}
				return nil
			})
			apply := exec.Command(bin, "apply", "-auto-approve", "-input=false", "-no-color")
			apply.Dir, apply.Env = w.dir, w.env
			var out bytes.Buffer
			apply.Stdout, apply.Stderr = &out, &out
			if err := apply.Start(); err != nil {
				t.Fatal(err)
			}
			lock := s.waitLock(state, 30*time.Second)
			if err := apply.Wait(); err != nil {
				t.Fatalf("%s apply: %v\n%s", client, err, out.String())
			}
			if lock.Token != "alice" || lock.ID == "" {
				t.Errorf("the lock during the apply: %+v, want one held by alice", lock)
			}
			if got := s.state(state).inputs()["terraform_data.a"]; got != "one" {
				t.Errorf("state holds input %q, want one", got)
			}
			if _, list := s.versionsAs(state, "ops"); list.Lock != nil {
				t.Errorf("the apply left the state locked: %+v", list.Lock)
			}
			run("plan", "-detailed-exitcode", "-input=false", "-no-color", "-lock-timeout=0s")
		})
	}
}

func TestTFStateTofuLifecycle(t *testing.T) {
	s := tfsStart(t, backend.Config{})
	w := s.work("life", "alice", tfsDataTF(map[string]string{"a": "one"}, 0))
	if code, _ := s.request("GET", "/tfstate/life", "alice", nil); code != http.StatusNoContent {
		t.Fatalf("state after init: %d, want 204", code)
	}

	w.must("apply", "-auto-approve", "-input=false", "-no-color")
	st := s.state("life")
	if st.Serial == 0 || st.Lineage == "" || st.inputs()["terraform_data.a"] != "one" {
		t.Fatalf("state after apply: %+v", st)
	}
	if _, _, code := w.run("plan", "-detailed-exitcode", "-input=false", "-no-color"); code != 0 {
		t.Fatalf("plan after apply: exit %d, want 0 (no changes)", code)
	}

	os.WriteFile(filepath.Join(w.dir, "main.tf.json"), []byte(tfsDataTF(map[string]string{"a": "two", "b": "three"}, 0)), 0o600)
	if _, _, code := w.run("plan", "-detailed-exitcode", "-input=false", "-no-color"); code != 2 {
		t.Fatalf("plan after a change: exit %d, want 2 (changes)", code)
	}
	w.must("apply", "-auto-approve", "-input=false", "-no-color")
	st2 := s.state("life")
	if st2.Lineage != st.Lineage || st2.Serial <= st.Serial {
		t.Fatalf("second apply: lineage %s serial %d after lineage %s serial %d", st2.Lineage, st2.Serial, st.Lineage, st.Serial)
	}
	if got := st2.inputs(); got["terraform_data.a"] != "two" || got["terraform_data.b"] != "three" {
		t.Fatalf("state after the second apply: %v", got)
	}
	pulled := w.must("state", "pull")
	var pulledDoc tfsStateDoc
	if err := json.Unmarshal([]byte(pulled), &pulledDoc); err != nil || pulledDoc.Serial != st2.Serial {
		t.Fatalf("state pull: serial %d (%v), want %d", pulledDoc.Serial, err, st2.Serial)
	}

	w.must("destroy", "-auto-approve", "-input=false", "-no-color")
	st3 := s.state("life")
	if len(st3.Resources) != 0 || st3.Lineage != st.Lineage {
		t.Fatalf("state after destroy: %+v", st3)
	}

	list := s.versions("life")
	if list.Total < 3 || !list.Items[0].Current || list.Lock != nil {
		t.Fatalf("versions after three applies: %+v", list)
	}
	for _, v := range list.Items {
		if v.Token != "alice" || v.LockHolder == nil || v.LockHolder.Token != "alice" || v.MD5 == "" {
			t.Errorf("version %d: token %q, lock holder %+v, md5 %q; want alice under her lock, with Content-MD5", v.Version, v.Token, v.LockHolder, v.MD5)
		}
	}
	logs := s.logs.String()
	for _, m := range []string{"method=LOCK", "method=UNLOCK", "method=POST", "method=GET"} {
		if !strings.Contains(logs, m+" path=/tfstate/life status=200") {
			t.Errorf("no successful %s in the request log", m)
		}
	}
	if strings.Contains(logs, s.tokens["alice"]) {
		t.Error("the server log contains alice's token")
	}
}

func TestTFStateConcurrentApply(t *testing.T) {
	s := tfsStart(t, backend.Config{})
	tf := tfsDataTF(map[string]string{"a": "shared"}, 3)
	wa := s.work("shared", "alice", tf)
	wb := s.work("shared", "bob", tf)

	// alice applies and holds the lock while her provisioner sleeps; bob
	// applies meanwhile.
	var aOut, aErr bytes.Buffer
	ca := wa.cmd("apply", "-auto-approve", "-input=false", "-no-color")
	ca.Stdout, ca.Stderr = &aOut, &aErr
	if err := ca.Start(); err != nil {
		t.Fatal(err)
	}
	lock := s.waitLock("shared", 30*time.Second)
	if lock.Token != "alice" {
		t.Fatalf("lock holder %+v, want alice", lock)
	}
	_, bErr, code := wb.run("apply", "-auto-approve", "-input=false", "-no-color")
	if err := ca.Wait(); err != nil {
		t.Fatalf("alice's apply: %v\n%s\n%s", err, aOut.String(), aErr.String())
	}
	if code == 0 {
		t.Fatal("bob's apply succeeded while alice held the lock")
	}
	t.Logf("bob's apply, refused:\n%s", bErr)
	for _, want := range []string{"Error acquiring the state lock", lock.ID, "token alice"} {
		if !strings.Contains(bErr, want) {
			t.Errorf("bob's stderr does not name the holder (%q):\n%s", want, bErr)
		}
	}

	// Nothing was lost: alice's apply is the state, and bob, once the lock
	// is free, finds nothing to do.
	st := s.state("shared")
	if got := st.inputs(); len(got) != 1 || got["terraform_data.a"] != "shared" {
		t.Fatalf("state after the race: %v", got)
	}
	out := wb.must("apply", "-auto-approve", "-input=false", "-no-color", "-lock-timeout=30s")
	if !strings.Contains(out, "No changes") {
		t.Errorf("bob's second apply made changes:\n%s", out)
	}
	st2 := s.state("shared")
	if st2.Lineage != st.Lineage || len(st2.inputs()) != 1 {
		t.Fatalf("state after bob's apply: %+v, before %+v", st2, st)
	}
}

func TestTFStateForceUnlock(t *testing.T) {
	s := tfsStart(t, backend.Config{})
	tf := tfsDataTF(map[string]string{"a": "x"}, 30)
	wa := s.work("stuck", "alice", tf)

	// alice's tofu dies holding the lock.
	ca := wa.cmd("apply", "-auto-approve", "-input=false", "-no-color")
	if err := ca.Start(); err != nil {
		t.Fatal(err)
	}
	lock := s.waitLock("stuck", 30*time.Second)
	syscall.Kill(-ca.Process.Pid, syscall.SIGKILL)
	ca.Wait()

	wb := s.work("stuck", "bob", tf)
	_, errOut, code := wb.run("force-unlock", "-force", "-no-color", lock.ID)
	if code == 0 {
		t.Fatalf("bob (edit) force-unlocked alice's lock:\n%s", errOut)
	}
	t.Logf("bob's force-unlock, refused:\n%s", errOut)
	if l := s.waitLock("stuck", time.Second); l.ID != lock.ID {
		t.Fatalf("lock after a refused force-unlock: %+v", l)
	}

	wo := s.work("stuck", "ops", tf)
	out := wo.must("force-unlock", "-force", "-no-color", lock.ID)
	if !strings.Contains(out, "successfully unlocked") {
		t.Errorf("admin force-unlock printed:\n%s", out)
	}
	if code, body := s.request("GET", "/api/v1/tfstate/stuck/versions", "ops", nil); code != http.StatusNotFound {
		t.Fatalf("versions of a state never written and no longer locked: %d %s, want 404", code, body)
	}
	if logs := s.logs.String(); !strings.Contains(logs, `msg="state force-unlocked" state=stuck lock=`+lock.ID+` holder=alice`) || !strings.Contains(logs, "by=ops") {
		t.Errorf("the force-unlock is not logged:\n%s", logs)
	}
	// The state is usable again.
	tfQuick := tfsDataTF(map[string]string{"a": "x"}, 0)
	os.WriteFile(filepath.Join(wb.dir, "main.tf.json"), []byte(tfQuick), 0o600)
	wb.must("apply", "-auto-approve", "-input=false", "-no-color")
}

const tfsEncryption = `key_provider "pbkdf2" "k" {
  passphrase    = "correct horse battery staple"
  iterations    = 200000
  hash_function = "sha256"
}
method "aes_gcm" "m" {
  keys = key_provider.pbkdf2.k
}
state {
  method   = method.aes_gcm.m
  enforced = true
}
plan {
  method   = method.aes_gcm.m
  enforced = true
}
`

func TestTFStateEncrypted(t *testing.T) {
	s := tfsStart(t, backend.Config{})
	secret := "plaintext-marker-4f1c"
	w := s.work("enc", "alice", tfsDataTF(map[string]string{"a": secret}, 0), "TF_ENCRYPTION="+tfsEncryption)
	w.must("apply", "-auto-approve", "-input=false", "-no-color")
	// Markers long enough that ciphertext never holds them by chance (a
	// 4-letter word does, in base64, about once in 10,000 runs).
	more := "second-plaintext-marker-9d2e"
	os.WriteFile(filepath.Join(w.dir, "main.tf.json"), []byte(tfsDataTF(map[string]string{"a": secret, "b": more}, 0)), 0o600)
	w.must("apply", "-auto-approve", "-input=false", "-no-color")

	code, raw := s.request("GET", "/tfstate/enc", "alice", nil)
	if code != http.StatusOK {
		t.Fatalf("GET: %d", code)
	}
	for _, plain := range []string{secret, "terraform_data", more} {
		if bytes.Contains(raw, []byte(plain)) {
			t.Errorf("stored state contains the plaintext %q", plain)
		}
	}
	var head struct {
		Serial    *uint64 `json:"serial"`
		Lineage   string  `json:"lineage"`
		Encrypted string  `json:"encrypted_data"`
	}
	if err := json.Unmarshal(raw, &head); err != nil || head.Serial == nil || head.Lineage == "" || head.Encrypted == "" {
		t.Fatalf("stored state is not OpenTofu-encrypted state (%v): %.200s", err, raw)
	}
	list := s.versions("enc")
	if cur := list.Items[0]; cur.Serial == nil || *cur.Serial != *head.Serial || cur.Lineage != head.Lineage {
		t.Errorf("versions listing of encrypted state: %+v, want serial %d lineage %s", cur, *head.Serial, head.Lineage)
	}

	pulled := w.must("state", "pull")
	if !strings.Contains(pulled, secret) || !strings.Contains(pulled, more) {
		t.Fatalf("state pull did not decrypt the state:\n%.500s", pulled)
	}
	// Without the key the state cannot be read.
	w2 := s.newWork("enc", "bob", tfsDataTF(map[string]string{"a": secret}, 0))
	if out, errOut, code := w2.run("init", "-input=false", "-no-color"); code == 0 || !strings.Contains(errOut, "encrypted") {
		t.Fatalf("init without the key: exit %d, want a failure that says the state is encrypted\n%s\n%s", code, out, errOut)
	}

	// The stale-writer guard reads serial and lineage of encrypted state
	// too: an older version pushed back is refused.
	code, old := s.request("GET", fmt.Sprintf("/tfstate/enc?version=%d", list.Items[1].Version), "ops", nil)
	if code != http.StatusOK {
		t.Fatalf("GET old version: %d", code)
	}
	code, body := s.request("POST", "/tfstate/enc", "alice", old)
	if code != http.StatusConflict || !strings.Contains(string(body), "stale writer") {
		t.Fatalf("POST of an older encrypted state: %d %s, want 409", code, body)
	}
}

// failPosts puts a reverse proxy on loopback in front of s, which answers
// 500 to a POST of a state for which fail says so, as a server whose store
// failed would, and points s's clients (tofu included) at it.
func failPosts(t *testing.T, s *tfsServer, fail func(state string) bool) {
	t.Helper()
	target, err := url.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	front := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if state, ok := strings.CutPrefix(r.URL.Path, "/tfstate/"); ok && r.Method == http.MethodPost && fail(state) {
			http.Error(w, `{"status":"failure","message":"the store failed","code":500}`, http.StatusInternalServerError)
			return
		}
		proxy.ServeHTTP(w, r)
	})}
	go front.Serve(ln)
	t.Cleanup(func() { front.Close() })
	s.url = "http://" + ln.Addr().String()
}

func TestTFStateErroredPostRecovery(t *testing.T) {
	var fail atomic.Bool
	var failed atomic.Int32
	s := tfsStart(t, backend.Config{})
	failPosts(t, s, func(name string) bool {
		if name == "flaky" && fail.Load() {
			failed.Add(1)
			return true
		}
		return false
	})
	w := s.work("flaky", "alice", tfsDataTF(map[string]string{"a": "v1"}, 0))
	w.must("apply", "-auto-approve", "-input=false", "-no-color")
	before := s.state("flaky")

	fail.Store(true)
	os.WriteFile(filepath.Join(w.dir, "main.tf.json"), []byte(tfsDataTF(map[string]string{"a": "v2"}, 0)), 0o600)
	_, errOut, code := w.run("apply", "-auto-approve", "-input=false", "-no-color")
	fail.Store(false)
	if code == 0 {
		t.Fatal("apply succeeded although every POST failed")
	}
	if failed.Load() < 2 {
		t.Errorf("tofu sent %d POSTs, want its retries too", failed.Load())
	}
	t.Logf("apply with failing POSTs:\n%s", errOut)
	errored := filepath.Join(w.dir, "errored.tfstate")
	if _, err := os.Stat(errored); err != nil {
		t.Fatalf("tofu left no errored.tfstate: %v\n%s", err, errOut)
	}
	if got := s.state("flaky"); got.Serial != before.Serial {
		t.Fatalf("a failed POST changed the state: serial %d, was %d", got.Serial, before.Serial)
	}
	if l := s.versions("flaky").Lock; l != nil {
		t.Fatalf("tofu left the lock held after the failed apply: %+v", l)
	}

	w.must("state", "push", "errored.tfstate")
	after := s.state("flaky")
	if after.inputs()["terraform_data.a"] != "v2" || after.Serial <= before.Serial || after.Lineage != before.Lineage {
		t.Fatalf("state after push: %+v, before %+v", after, before)
	}
	if _, _, code := w.run("plan", "-detailed-exitcode", "-input=false", "-no-color"); code != 0 {
		t.Fatalf("plan after recovery: exit %d, want 0", code)
	}
}
