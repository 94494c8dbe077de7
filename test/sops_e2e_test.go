package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"

	"github.com/rezuscloud/rezuscloud/internal/preview"
	"github.com/rezuscloud/rezuscloud/internal/sopsfile"
	"github.com/rezuscloud/rezuscloud/schema"
)

// SOPS end to end: config patches committed encrypted with age, the
// server decrypting them with --sops-age-key-file, the real tofu and the
// simulated Talos nodes. The plain values must reach the machines and
// nothing else.

// sopsE2E is an e2e whose server holds the age identity key.
type sopsE2E struct {
	*e2e
	key, other *age.X25519Identity
	// secrets are every plain value the test encrypted, to look for.
	secrets []string
}

// sopsSecret returns a new plain value that occurs nowhere else.
func (s *sopsE2E) sopsSecret() string {
	b := make([]byte, 12)
	rand.Read(b)
	v := "sops-plain-" + hex.EncodeToString(b)
	s.secrets = append(s.secrets, v)
	return v
}

// newSOPSE2E starts the server with state encryption on, the Talos plane's
// short timings, previews of every branch and the age key in a file.
func newSOPSE2E(t *testing.T) *sopsE2E {
	t.Helper()
	key, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := age.GenerateX25519Identity()
	keyFile := filepath.Join(t.TempDir(), "age.agekey")
	if err := os.WriteFile(keyFile, []byte("# public key: "+key.Recipient().String()+"\n"+key.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newE2E(t, e2eOptions{
		args: planeArgs("--sops-age-key-file", keyFile, "--preview-refs", "refs/heads/*"),
		env:  []string{"REZUSCLOUD_STATE_PASSPHRASE=" + atRestPassphrase},
	})
	return &sopsE2E{e2e: e, key: key, other: other}
}

// Two patches of production: registry-auth, whose whole text is
// encrypted, and proxy, a mapping of which only https_proxy is.
const (
	sopsRegistryFile = e2eManifests + "/production/registry-auth.yaml"
	sopsProxyFile    = e2eManifests + "/production/proxy.yaml"
)

func sopsRegistryPatch(password string) string {
	return `apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: registry-auth
  labels:
    rezuscloud.io/tenant: production
spec:
  patch: |
    machine:
      registries:
        config:
          registry.example.com:
            auth:
              username: robot
              password: ` + password + `
`
}

func sopsProxyPatch(password string) string {
	return `apiVersion: rezuscloud.io/v1
kind: ConfigPatch
metadata:
  name: proxy
  labels:
    rezuscloud.io/tenant: production
spec:
  patch:
    machine:
      env:
        https_proxy: http://proxy:` + password + `@proxy.example.com:3128
        no_proxy: .cluster.local
`
}

// encrypt encrypts plain for the recipients with the SOPS packages' own
// encrypt path, as `sops encrypt --encrypted-regex REGEX` would.
func (s *sopsE2E) encrypt(plain, regex string, to ...*age.X25519Identity) string {
	s.t.Helper()
	var recipients []string
	for _, id := range to {
		recipients = append(recipients, id.Recipient().String())
	}
	b, err := sopsfile.Encrypt([]byte(plain), recipients, regex)
	if err != nil {
		s.t.Fatal(err)
	}
	if strings.Contains(string(b), "sops-plain-") {
		s.t.Fatal("the encrypted file holds the plain value")
	}
	return string(b)
}

// machineConfigs returns the running config of each of the tenant's
// machines, as the machines serve it over the Talos API.
func (s *sopsE2E) machineConfigs(tenant string) map[string]string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]string{}
	for _, m := range s.srv.tenantMachines(tenant) {
		c := planeTalosClient(s.t, s.e2e, tenant, m.Spec.ManagementAddress)
		mc, err := safe.StateGet[*config.MachineConfig](ctx, c.COSI, config.NewMachineConfig(nil).Metadata())
		if err != nil {
			s.t.Fatalf("%s: running config: %v", m.Spec.TFAddress, err)
		}
		b, err := mc.Provider().Bytes()
		if err != nil {
			s.t.Fatal(err)
		}
		out[m.Spec.TFAddress] = string(b)
	}
	return out
}

// patch returns the ConfigPatch the API serves.
func (s *sopsE2E) patch(name string) schema.ConfigPatch {
	s.t.Helper()
	var p schema.ConfigPatch
	s.srv.mustGet("/api/v1/tenants/production/patches/"+name, &p)
	return p
}

// refused pushes the work tree and checks that the commit is refused at
// path with a message that has want, and that nothing changed: the last
// good commit stays applied, tofu does not run, the patch is as it was.
func (s *sopsE2E) refused(msg, path, want, good string) {
	s.t.Helper()
	runs, before := s.srv.tofuRuns(), s.patch("registry-auth")
	sha := s.push(msg)
	c := s.srv.WaitCommit(sha)
	if c.Status.Phase != schema.CommitInvalid {
		s.t.Fatalf("%s: phase %s, want Invalid: %s", msg, c.Status.Phase, e2eBrief(c.Status))
	}
	found := false
	for _, p := range c.Status.Problems {
		found = found || (p.File == path && strings.Contains(p.Message, want))
	}
	if !found {
		s.t.Errorf("%s: no problem at %s saying %q: %s", msg, path, want, e2eBrief(c.Status))
	}
	if st := s.srv.status(); st.Reconciler.LastAppliedCommit != good {
		s.t.Errorf("%s: last applied commit %s, want %s still", msg, st.Reconciler.LastAppliedCommit, good)
	}
	if got := s.srv.tofuRuns(); got != runs {
		s.t.Errorf("%s: %d tofu runs, want none", msg, got-runs)
	}
	if after := s.patch("registry-auth"); after.Metadata.ResourceVersion != before.Metadata.ResourceVersion {
		s.t.Errorf("%s: registry-auth changed from version %s to %s", msg, before.Metadata.ResourceVersion, after.Metadata.ResourceVersion)
	}
}

// TestSOPSEndToEnd: config patches encrypted with age are applied to the
// machines, and their plain values are found nowhere else: not in the
// data dir (the store, the rendered workspaces, the previews), the logs,
// the API, the dashboard or previews. A re-encryption to new recipients
// changes nothing and runs no tofu; a file for another key, a tampered
// file and one with broken metadata are refused at their path, and
// nothing changes; a changed value runs tofu and reaches the machines.
func TestSOPSEndToEnd(t *testing.T) {
	s := newSOPSE2E(t)
	planeWaitReady(t, s.e2e, "production")
	registry, proxy := s.sopsSecret(), s.sopsSecret()
	s.work.Write(sopsRegistryFile, s.encrypt(sopsRegistryPatch(registry), "^patch$", s.key))
	s.work.Write(sopsProxyFile, s.encrypt(sopsProxyPatch(proxy), "^https_proxy$", s.key))
	applied := s.push("Production: registry credentials and a proxy, encrypted with SOPS")
	s.srv.waitApplied(applied)
	planeWaitReady(t, s.e2e, "production")
	for m, cfg := range s.machineConfigs("production") {
		if !strings.Contains(cfg, "password: "+registry) || !strings.Contains(cfg, "http://proxy:"+proxy+"@proxy.example.com:3128") {
			t.Errorf("%s: the running config lacks the decrypted values", m)
		}
	}

	// The API shows what was encrypted as <encrypted>, and the rest.
	if p := s.patch("registry-auth"); p.Spec.Patch != schema.EncryptedValue || p.Status.Machines != 5 {
		t.Errorf("registry-auth as served: a patch of %d bytes on %d machines; want %s on 5", len(p.Spec.Patch), p.Status.Machines, schema.EncryptedValue)
	}
	if p := s.patch("proxy"); !strings.Contains(p.Spec.Patch, "https_proxy: "+schema.EncryptedValue) || !strings.Contains(p.Spec.Patch, "no_proxy: .cluster.local") {
		t.Errorf("proxy as served: want https_proxy %s and no_proxy in clear", schema.EncryptedValue)
	}
	tenant := planeTenant(t, s.e2e, "production")

	// Rotation: both files encrypted again, also for another key, with
	// the same plain values: nothing runs.
	runs, applies := s.srv.tofuRuns(), len(planeCalls(t, s.e2e, "production", "ApplyConfiguration"))
	good := s.encrypt(sopsRegistryPatch(registry), "^patch$", s.key, s.other)
	s.work.Write(sopsRegistryFile, good)
	s.work.Write(sopsProxyFile, s.encrypt(sopsProxyPatch(proxy), "^https_proxy$", s.other, s.key))
	rotated := s.push("Re-encrypt the production secrets for a second key")
	c := s.srv.waitApplied(rotated)
	if r := e2eResult(t, c, "production"); r.Phase != schema.CommitSucceeded || r.OutputTail != "" {
		t.Errorf("production after the rotation: %s with %d bytes of tofu output, want Succeeded without tofu", r.Phase, len(r.OutputTail))
	}
	if got := s.srv.tofuRuns(); got != runs {
		t.Errorf("the rotation ran tofu %d times, want none", got-runs)
	}
	if got := len(planeCalls(t, s.e2e, "production", "ApplyConfiguration")); got != applies {
		t.Errorf("the rotation applied %d configs to machines, want none", got-applies)
	}
	if got := planeTenant(t, s.e2e, "production"); got.Metadata.Generation != tenant.Metadata.Generation {
		t.Errorf("the rotation moved production's generation %d -> %d", tenant.Metadata.Generation, got.Metadata.Generation)
	}

	// Bad input is refused at its path, and the rotated commit stays.
	s.work.Write(sopsRegistryFile, s.encrypt(sopsRegistryPatch(s.sopsSecret()), "^patch$", s.other))
	s.refused("Registry credentials for a key the server does not hold", sopsRegistryFile, "no age identity matches", rotated)
	s.work.Write(sopsRegistryFile, sopsTamper(t, good))
	s.refused("A tampered value", sopsRegistryFile, "MAC mismatch", rotated)
	s.work.Write(sopsRegistryFile, regexp.MustCompile(`(?m)^\s+mac: .*\n`).ReplaceAllString(good, ""))
	s.refused("Metadata without a mac", sopsRegistryFile, "metadata", rotated)

	// A changed value runs tofu and reaches the machines.
	changed := s.sopsSecret()
	s.work.Write(sopsRegistryFile, s.encrypt(sopsRegistryPatch(changed), "^patch$", s.key))
	runs = s.srv.tofuRuns()
	s.srv.waitApplied(s.push("Change the registry password"))
	if s.srv.tofuRuns() == runs {
		t.Error("a changed encrypted value ran no tofu")
	}
	if got := planeTenant(t, s.e2e, "production"); got.Metadata.Generation != tenant.Metadata.Generation+1 {
		t.Errorf("production's generation %d after a changed value, want %d", got.Metadata.Generation, tenant.Metadata.Generation+1)
	}
	planeWaitReady(t, s.e2e, "production")
	for m, cfg := range s.machineConfigs("production") {
		if !strings.Contains(cfg, "password: "+changed) || strings.Contains(cfg, registry) {
			t.Errorf("%s: the running config does not carry the changed value", m)
		}
	}

	// Previews: of a branch, and of an uploaded tree; both plan.
	s.work.Write(sopsProxyFile, s.encrypt(sopsProxyPatch(s.sopsSecret()), "^https_proxy$", s.key))
	branch := s.pushBranch("new-proxy", "A new proxy password")
	if pc := s.srv.previewCommit(branch); pc.Status.Phase != schema.CommitSucceeded {
		t.Errorf("preview of %s: %s", branch[:12], e2eBrief(pc.Status))
	}
	uploaded := s.sopsUpload(s.encrypt(sopsRegistryPatch(s.sopsSecret()), "^patch$", s.key))

	s.checkNothingLeaks(changed, uploaded, applied, rotated, "preview-"+branch)
}

// sopsTamper changes one character of the first encrypted value of an
// encrypted file.
func sopsTamper(t *testing.T, file string) string {
	t.Helper()
	const marker = "ENC[AES256_GCM,data:"
	i := strings.Index(file, marker)
	if i < 0 {
		t.Fatal("no encrypted value to tamper with")
	}
	i += len(marker)
	c := byte('A')
	if file[i] == 'A' {
		c = 'B'
	}
	return file[:i] + string(c) + file[i+1:]
}

// sopsUpload previews the work tree's manifests with the registry file
// replaced by registry, planned and rendered, and returns the answer.
func (s *sopsE2E) sopsUpload(registry string) []byte {
	s.t.Helper()
	req := preview.Request{Files: map[string]string{}, Root: e2eManifests, Plan: true, Rendered: true}
	root := filepath.Join(s.work.Dir(), e2eManifests)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(s.work.Dir(), p)
		req.Files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		s.t.Fatal(err)
	}
	req.Files[sopsRegistryFile] = registry
	body, _ := json.Marshal(req)
	code, b := s.srv.Request("POST", "/api/v1/previews", body, http.Header{"Content-Type": {"application/json"}})
	var res preview.Result
	if code != http.StatusOK || json.Unmarshal(b, &res) != nil || !res.Valid {
		s.t.Fatalf("preview of an uploaded tree: %d %.300s", code, b)
	}
	for _, tn := range res.Tenants {
		if tn.Tenant == "production" && (tn.Plan == nil || tn.Error != "") {
			s.t.Errorf("the uploaded preview did not plan production: %+v", tn)
		}
	}
	return b
}

// checkNothingLeaks looks for every plain value the test encrypted, plain
// or base64, in what the server keeps and shows: every file of the data
// dir, its log, what the API serves (the objects, commits, the rendered
// workspace, a machine config, the watch's history, the answer of the
// uploaded preview) and the dashboard's pages. The simulated machines'
// own disks (outside the data dir) hold the value they run with, running:
// the search finds it there.
func (s *sopsE2E) checkNothingLeaks(running string, uploaded []byte, commits ...string) {
	t := s.t
	t.Helper()
	forms := map[string]string{}
	for _, v := range s.secrets {
		forms[v] = v
		for _, f := range base64Forms([]byte(v)) {
			forms[f] = v
		}
	}
	leaks := func(where string, b []byte) {
		t.Helper()
		for f, v := range forms {
			if bytes.Contains(b, []byte(f)) {
				t.Errorf("%s holds the plain value %s (as %q)", where, v[:len("sops-plain-")+4]+"…", f[:min(len(f), 8)]+"…")
				return
			}
		}
	}
	files, onMachines := 0, 0
	walkAtRest(t, s.data, func(rel string, b []byte) {
		files++
		leaks("the data dir's "+rel, b)
	})
	walkAtRest(t, s.data+"-sim", func(_ string, b []byte) {
		if bytes.Contains(b, []byte(running)) {
			onMachines++
		}
	})
	if files < 10 || onMachines == 0 {
		t.Errorf("read %d files of the data dir; %d files of the simulated machines hold the applied value: the search finds nothing", files, onMachines)
	}
	for _, pattern := range []string{"work/*/*.tfplan", "work/*/*.tfvars.json", "previews/*/*/*.tfvars.json", "previews/*/*/*.tfplan"} {
		if m, _ := filepath.Glob(filepath.Join(s.data, pattern)); len(m) > 0 {
			t.Errorf("left between runs: %s", strings.Join(m, ", "))
		}
	}
	leaks("the server's log", []byte(s.srv.Log()))
	leaks("the uploaded preview's answer", uploaded)

	machine := s.srv.tenantMachines("production")[0].Metadata.Name
	paths := []string{"/api/v1/tenants", "/api/v1/tenants/production", "/api/v1/tenants/production/patches",
		"/api/v1/tenants/production/patches/registry-auth", "/api/v1/tenants/production/patches/proxy",
		"/api/v1/tenants/production/node-groups", "/api/v1/tenants/production/history", "/api/v1/commits?limit=1000",
		"/api/v1/status", "/api/v1/tenants/production/rendered", "/api/v1/tenants/production/machines/" + machine + "/config",
		"/", "/tenants/production", "/commits"}
	for _, name := range commits {
		paths = append(paths, "/api/v1/commits/"+name, "/commits/"+name)
	}
	for _, p := range paths {
		code, b := s.srv.Request("GET", p, nil, nil)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d", p, code)
		}
		leaks("GET "+p, b)
		if p == "/tenants/production" && !strings.Contains(string(b), "&lt;encrypted&gt;") {
			t.Error("the dashboard's tenant page does not show the patches with <encrypted>")
		}
		if strings.HasSuffix(p, "/config") && !strings.Contains(string(b), "Left out: the patches proxy, registry-auth") {
			t.Errorf("the machine config served does not start by naming the patches it leaves out")
		}
	}
	leaks("the watch of production", s.watched("/api/v1/tenants/production/events?watch=true&resourceVersion=0"))
}

// watched returns what a watch from the start of the event log sends in
// two seconds.
func (s *sopsE2E) watched(path string) []byte {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.srv.URL()+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if len(b) == 0 {
		s.t.Fatalf("the watch %s sent nothing", path)
	}
	return b
}
