package test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/internal/tfcli"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
)

// e2eTenantSecrets reads a tenant's Talos secrets bundle from its plain TF
// state through the state backend (see e2eBundle), and returns the secret
// values in it: every value of a key, secret, token or encryption secret
// line.
func e2eTenantSecrets(t *testing.T, s *e2eServer, tenant string) []string {
	t.Helper()
	code, state := s.Request(http.MethodGet, "/tfstate/"+tenant, nil, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /tfstate/%s: %d", tenant, code)
	}
	bundle := e2eBundle(t, state)
	var out []string
	for _, line := range strings.Split(string(bundle), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if !ok || len(v) < 16 {
			continue
		}
		switch k {
		case "key", "secret", "bootstraptoken", "token", "secretboxencryptionsecret", "aescbcencryptionsecret":
			out = append(out, v)
		}
	}
	if len(out) < 5 {
		t.Fatalf("found only %d secret values in %s's bundle", len(out), tenant)
	}
	return out
}

// e2eBundle finds the Talos secrets bundle in a plain (or decrypted)
// state: the value of render.SecretsAttribute of render.SecretsResource.
func e2eBundle(t *testing.T, state []byte) []byte {
	t.Helper()
	var st struct {
		Resources []struct {
			Mode      string `json:"mode"`
			Type      string `json:"type"`
			Name      string `json:"name"`
			Instances []struct {
				Attributes map[string]json.RawMessage `json:"attributes"`
			} `json:"instances"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(state, &st); err != nil {
		t.Fatalf("state: %v", err)
	}
	for _, r := range st.Resources {
		if r.Mode == "managed" && r.Type+"."+r.Name == render.SecretsResource && len(r.Instances) == 1 {
			var a struct{ Value string } // a terraform_data attribute is {"value": V, "type": T}
			if json.Unmarshal(r.Instances[0].Attributes[render.SecretsAttribute], &a) == nil && a.Value != "" {
				return []byte(a.Value)
			}
		}
	}
	t.Fatalf("the state has no %s with the bundle in %s (%d resources)", render.SecretsResource, render.SecretsAttribute, len(st.Resources))
	return nil
}

// e2ePullState reads a tenant's state as tofu sees it: it runs `tofu
// init` and `tofu state pull` in an empty workspace whose http backend is
// the server, with the server's encryption passphrase, and returns the
// decrypted state.
func e2ePullState(t *testing.T, url, tenant, user, token, passphrase string) []byte {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf.json"), []byte(`{"terraform":{"backend":{"http":{}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cli := filepath.Join(dir, "tofu.rc")
	if err := tfcli.WriteCLIConfig(cli, tfcli.CLIConfig{MirrorDir: testenv.ProviderMirror(t)}); err != nil {
		t.Fatal(err)
	}
	enc, err := tofu.EncryptionConfig(passphrase, false)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TF_CLI_CONFIG_FILE=" + cli, "TF_IN_AUTOMATION=1",
		"TF_ENCRYPTION=" + enc,
		"TF_HTTP_ADDRESS=" + url + "/tfstate/" + tenant,
		"TF_HTTP_LOCK_ADDRESS=" + url + "/tfstate/" + tenant, "TF_HTTP_LOCK_METHOD=LOCK",
		"TF_HTTP_UNLOCK_ADDRESS=" + url + "/tfstate/" + tenant, "TF_HTTP_UNLOCK_METHOD=UNLOCK",
		"TF_HTTP_USERNAME=" + user, "TF_HTTP_PASSWORD=" + token,
	}
	tofu := testenv.Tofu(t)
	for _, args := range [][]string{{"init", "-input=false", "-no-color"}, {"state", "pull"}} {
		cmd := exec.Command(tofu, args...)
		cmd.Dir, cmd.Env = dir, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("tofu %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		if args[0] == "state" {
			return stdout.Bytes()
		}
	}
	return nil
}

// TestReconcileSecretsStayPrivate checks that the cluster keys a tenant's
// state holds never reach what the read API serves to every viewer
// (commits with their tofu output, tenants, machines, status) nor the
// server's log.
func TestReconcileSecretsStayPrivate(t *testing.T) {
	e := newE2E(t, e2eOptions{})
	s := e.srv
	e.setCount("production", "workers", 3)
	scaled := e.push("Scale production workers to 3")
	s.waitApplied(scaled)

	secrets := append(e2eTenantSecrets(t, s, "production"), e2eTenantSecrets(t, s, "staging")...)
	// The PEM header of a private key, plain and base64-encoded as the
	// bundle holds it.
	markers := append([]string{"PRIVATE KEY", "LS0tLS1CRUdJTiBFQyBQUklWQVRF", "LS0tLS1CRUdJTiBSU0EgUFJJVkFURS"}, secrets...)

	paths := []string{
		"/api/v1/commits", "/api/v1/commits/" + e.first, "/api/v1/commits/" + scaled,
		"/api/v1/tenants", "/api/v1/tenants/production", "/api/v1/tenants/staging",
		"/api/v1/tenants/production/node-groups", "/api/v1/tenants/production/patches",
		"/api/v1/machines", "/api/v1/providers", "/api/v1/status",
	}
	for _, path := range paths {
		code, body := s.Request(http.MethodGet, path, nil, nil)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d", path, code)
			continue
		}
		if !json.Valid(body) {
			t.Errorf("GET %s: not JSON", path)
		}
		for n, m := range markers {
			if i := strings.Index(string(body), m); i >= 0 {
				t.Errorf("GET %s serves secret material (marker %d) in its field %s", path, n, e2eFieldAt(string(body), i))
				break
			}
		}
	}
	log := s.Log()
	for n, m := range markers {
		if strings.Contains(log, m) {
			t.Errorf("the server log holds secret material (marker %d)", n)
			break
		}
	}
}

var e2eFieldRE = regexp.MustCompile(`"([A-Za-z]+)":`)

// e2eFieldAt names the JSON member whose value holds byte i of s, to say
// where a secret is without quoting it.
func e2eFieldAt(s string, i int) string {
	m := e2eFieldRE.FindAllStringSubmatch(s[:i], -1)
	if len(m) == 0 {
		return "(none)"
	}
	return m[len(m)-1][1]
}
