package test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Roles a caller of the matrix has, in the server's order. rolesNone is a
// caller without valid credentials; an endpoint that needs rolesOpen
// answers everyone.
const (
	rolesNone = iota - 1
	rolesOpen
	rolesView
	rolesEdit
	rolesAdmin
)

var rolesNames = map[int]string{rolesOpen: "none", rolesView: "view", rolesEdit: "edit", rolesAdmin: "admin"}

// rolesPassphrase encrypts the tenants' TF state in TestRoles.
const rolesPassphrase = "roles-e2e-passphrase-7f3c9a1e"

// rolesCaller is one way of calling the server: a token of a role, or
// credentials that must not get anyone in.
type rolesCaller struct {
	name string
	role int
	// token is the caller's token name, as the audit log names it.
	token string
	auth  http.Header
}

// rolesCase is one endpoint of the matrix.
type rolesCase struct {
	name   string
	method string
	path   string
	// body returns the request body for a caller; nil for none.
	body func(c rolesCaller) []byte
	// header holds extra request headers.
	header http.Header
	// min is the lowest role that reaches the endpoint.
	min int
	// want is the status code of a caller with at least min.
	want int
	// watch: the answer is a stream; read it until its current state has
	// ended, then hang up.
	watch bool
	// download names what the audit log calls the download ("kubeconfig",
	// "talosconfig", "machine config"); "" for other endpoints.
	download string
	// forceUnlock: a granted answer is a force-unlock, which the audit
	// log records as "force-unlock".
	forceUnlock bool
	// secretBody: a granted answer holds cluster keys by design (a machine
	// config); it is left out of the key-material check.
	secretBody bool
	// check looks at a granted answer's body.
	check func(t *testing.T, body []byte)
}

// rolesRun records what the server sent in TestRoles, for the key-material
// check at the end.
type rolesRun struct {
	t       *testing.T
	srv     *e2eServer
	bodies  []rolesBody
	audited map[string]int // "token what" -> download attempts made
}

type rolesBody struct {
	what string
	body []byte
}

// TestRoles is the role × endpoint matrix, on one real server
// with a tokens file that holds a view, an edit and an admin token, and
// encrypted TF state. Every endpoint is called without a token, with wrong
// credentials and with each role: no or wrong credentials get 401
// Unauthorized, too low a role 403 Forbidden, enough the endpoint's answer.
// /healthz, /readyz, /version need no token. Then: the audit log has one
// line per download attempt; a kubeconfig downloaded over HTTP verifies
// against the Kubernetes CA kept in the tenant's state; and nothing the API
// answered, the server logged or the watches streamed holds the cluster's
// keys, tokens or the state passphrase.
func TestRoles(t *testing.T) {
	bin := servertest.Binary(t)
	work := t.TempDir()
	tokens := map[string]string{} // role -> token
	var lines []string
	for _, role := range []string{"view", "edit", "admin"} {
		secret, line := rolesCreateToken(t, bin, "roles-"+role, role)
		tokens[role] = secret
		lines = append(lines, line)
	}
	tokensFile := filepath.Join(work, "tokens")
	if err := os.WriteFile(tokensFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	e := newE2E(t, e2eOptions{
		args:   []string{"--tokens-file", tokensFile},
		env:    []string{"REZUSCLOUD_STATE_PASSPHRASE=" + rolesPassphrase},
		noWait: true,
	})
	s := e.srv
	admin := rolesCaller{name: "admin", role: rolesAdmin, token: "roles-admin", auth: rolesBearer(tokens["admin"])}
	run := &rolesRun{t: t, srv: s, audited: map[string]int{}}
	first := run.waitApplied(admin, e.first)
	if first.Status.Phase != schema.CommitSucceeded {
		t.Fatalf("first commit: %s", first.Status.Phase)
	}

	var machines struct {
		Items []schema.Machine `json:"items"`
	}
	run.mustJSON(admin, "/api/v1/tenants/production/machines", &machines)
	var cp, worker string
	for _, m := range machines.Items {
		switch m.Spec.Role {
		case schema.RoleControlPlane:
			cp = m.Metadata.Name
		default:
			worker = m.Metadata.Name
		}
	}
	if cp == "" || worker == "" {
		t.Fatalf("production has no control-plane machine or no worker: %+v", machines.Items)
	}

	callers := []rolesCaller{
		{name: "no token", role: rolesNone},
		{name: "wrong bearer token", role: rolesNone, auth: rolesBearer("not-a-token-" + strings.Repeat("x", 40))},
		{name: "admin name with a wrong password", role: rolesNone, auth: rolesBasic("roles-admin", tokens["edit"])},
		{name: "unknown token name", role: rolesNone, auth: rolesBasic("nobody", tokens["admin"])},
		{name: "empty bearer", role: rolesNone, auth: http.Header{"Authorization": {"Bearer "}}},
		{name: "view", role: rolesView, token: "roles-view", auth: rolesBearer(tokens["view"])},
		{name: "edit (basic auth)", role: rolesEdit, token: "roles-edit", auth: rolesBasic("roles-edit", tokens["edit"])},
		admin,
	}
	cases := rolesCases(t, e, first.Spec.SHA, cp, worker)

	for _, c := range callers {
		for _, rc := range cases {
			run.try(c, rc)
		}
	}

	t.Run("audit log", func(t *testing.T) { run.checkAudit(t, e.data, false) })
	// Attempts without valid credentials are refused before the download
	// handler runs; the audit log must still show them.
	t.Run("audit log of unauthenticated attempts", func(t *testing.T) { run.checkAudit(t, e.data, true) })

	var bundle []byte
	t.Run("state is encrypted at rest", func(t *testing.T) {
		code, raw := run.call(admin, http.MethodGet, "/tfstate/production", nil, nil)
		if code != http.StatusOK {
			t.Fatalf("GET /tfstate/production as admin: %d", code)
		}
		var st struct {
			Serial        *int            `json:"serial"`
			EncryptedData json.RawMessage `json:"encrypted_data"`
		}
		if err := json.Unmarshal(raw, &st); err != nil || st.Serial == nil || len(st.EncryptedData) == 0 {
			t.Fatalf("stored state of production is not an encrypted state (serial and encrypted_data): %v", err)
		}
		if bytes.Contains(raw, []byte("talos_bundle")) || bytes.Contains(raw, []byte("PRIVATE KEY")) {
			t.Fatal("the stored state of production names its secrets in clear text")
		}
	})
	t.Run("kubeconfig verifies against the state's CA", func(t *testing.T) {
		plain := e2ePullState(t, s.URL(), "production", "roles-admin", tokens["admin"], rolesPassphrase)
		bundle = e2eBundle(t, plain)
		k8sCA, osCA, err := talos.CACertificates(bundle)
		if err != nil {
			t.Fatal(err)
		}
		code, kc := run.call(admin, http.MethodGet, "/api/v1/tenants/production/kubeconfig", nil, nil)
		run.audited["roles-admin kubeconfig"]++
		if code != http.StatusOK {
			t.Fatalf("kubeconfig as admin: %d %s", code, kc)
		}
		rolesVerifyKubeconfig(t, kc, k8sCA)
		code, tc := run.call(admin, http.MethodGet, "/api/v1/tenants/production/talosconfig", nil, nil)
		run.audited["roles-admin talosconfig"]++
		if code != http.StatusOK {
			t.Fatalf("talosconfig as admin: %d %s", code, tc)
		}
		rolesVerifyTalosconfig(t, tc, osCA)
		// The check of the audit log above ran before these two downloads.
		run.checkAudit(t, e.data, false)
	})
	t.Run("no key material leaves the server", func(t *testing.T) {
		if bundle == nil {
			t.Skip("no secrets bundle: the subtest that reads it failed")
		}
		needles := rolesNeedles(t, bundle)
		// The needles must be in the form the keys take in what the server
		// hands out: a control-plane machine config holds them.
		code, cfg, _ := run.callHeader(admin, http.MethodGet, "/api/v1/tenants/production/machines/"+cp+"/config", nil, nil)
		run.audited["roles-admin machine config"]++
		if code != http.StatusOK {
			t.Fatalf("control-plane machine config: %d", code)
		}
		for _, n := range []string{"Kubernetes CA key (base64 PEM)", "bootstrap token", "secretbox secret"} {
			if !bytes.Contains(cfg, []byte(needles[n])) {
				t.Errorf("the control-plane machine config does not hold the %s as the check looks for it", n)
			}
		}
		audit, err := os.ReadFile(filepath.Join(e.data, "audit.log"))
		if err != nil {
			t.Fatal(err)
		}
		places := append([]rolesBody{
			{"server log", []byte(s.Log())},
			{"audit log", audit},
		}, run.bodies...)
		for _, p := range places {
			for what, n := range needles {
				if bytes.Contains(p.body, []byte(n)) {
					t.Errorf("%s holds the %s", p.what, what)
				}
			}
			if !strings.HasPrefix(p.what, "GET /api/v1/tenants/production/kubeconfig") &&
				!strings.HasPrefix(p.what, "GET /api/v1/tenants/production/talosconfig") &&
				bytes.Contains(p.body, []byte("PRIVATE KEY")) {
				t.Errorf("%s holds a PEM private key", p.what)
			}
		}
		t.Logf("checked %d answers, the server log (%d bytes) and the audit log for %d secrets", len(run.bodies), len(s.Log()), len(needles))
	})
}

// rolesCases is the endpoint table. sha is the applied commit, cp and
// worker machines of production.
func rolesCases(t *testing.T, e *e2e, sha, cp, worker string) []rolesCase {
	t.Helper()
	files := map[string]string{}
	for _, name := range []string{"production/tenant.yaml", "production/nodegroups.yaml", "production/patches.yaml", "staging/tenant.yaml", "staging/nodegroups.yaml", "staging/patches.yaml"} {
		files[name] = e.read(e2eManifests + "/" + name)
	}
	files["production/nodegroups.yaml"] = strings.Replace(files["production/nodegroups.yaml"], "count: 2", "count: 3", 1)
	previewBody, err := json.Marshal(map[string]any{"files": files, "root": ".", "rendered": true})
	if err != nil {
		t.Fatal(err)
	}
	// The scratch state that edit and admin lock, write, unlock and delete
	// in turn; every write has a higher serial.
	serial := 0
	lockBody := func(c rolesCaller) []byte {
		return fmt.Appendf(nil, `{"ID":%q,"Operation":"OperationTypeApply","Who":"roles@e2e","Version":"1.10.10","Path":""}`, rolesLockID(c))
	}
	stateBody := func(rolesCaller) []byte {
		serial++
		return fmt.Appendf(nil, `{"version":4,"terraform_version":"1.10.10","serial":%d,"lineage":"roles-scratch-lineage","outputs":{},"resources":[],"check_results":null}`, serial)
	}

	isList := func(min int) func(*testing.T, []byte) {
		return func(t *testing.T, b []byte) {
			var l struct {
				Items []json.RawMessage `json:"items"`
				Total *int              `json:"total"`
			}
			if err := json.Unmarshal(b, &l); err != nil || l.Total == nil || len(l.Items) < min {
				t.Errorf("want a list of at least %d items: %v %.200s", min, err, b)
			}
		}
	}
	isObject := func(kind, name string) func(*testing.T, []byte) {
		return func(t *testing.T, b []byte) {
			var o struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(b, &o); err != nil || o.Kind != kind || o.Metadata.Name != name {
				t.Errorf("want %s %s: %v %.200s", kind, name, err, b)
			}
		}
	}
	contains := func(s string) func(*testing.T, []byte) {
		return func(t *testing.T, b []byte) {
			if !bytes.Contains(b, []byte(s)) {
				t.Errorf("answer does not contain %q: %.300s", s, b)
			}
		}
	}
	readOnly := func(t *testing.T, b []byte) {
		var ae rolesAPIError
		if err := json.Unmarshal(b, &ae); err != nil || ae.Reason != "MethodNotAllowed" || !strings.Contains(ae.Message, e.repo) {
			t.Errorf("want a MethodNotAllowed error naming the repository %s: %s", e.repo, b)
		}
	}
	static := func(b []byte) func(rolesCaller) []byte { return func(rolesCaller) []byte { return b } }
	stateMetadata := func(t *testing.T, b []byte) {
		var l struct {
			Items []struct {
				Serial  *int   `json:"serial"`
				Lineage string `json:"lineage"`
			} `json:"items"`
		}
		if err := json.Unmarshal(b, &l); err != nil || len(l.Items) == 0 || l.Items[0].Serial == nil || l.Items[0].Lineage == "" {
			t.Errorf("want versions with serial and lineage: %v %.300s", err, b)
		}
		if bytes.Contains(b, []byte("encrypted_data")) {
			t.Errorf("the versions listing holds state bytes: %.300s", b)
		}
	}

	return []rolesCase{
		{name: "healthz", method: "GET", path: "/healthz", min: rolesOpen, want: 200, check: contains("ok")},
		{name: "readyz", method: "GET", path: "/readyz", min: rolesOpen, want: 200, check: contains("ok")},
		{name: "version", method: "GET", path: "/version", min: rolesOpen, want: 200, check: contains(`"goVersion"`)},

		{name: "list tenants", method: "GET", path: "/api/v1/tenants", min: rolesView, want: 200, check: isList(2)},
		{name: "get tenant", method: "GET", path: "/api/v1/tenants/production", min: rolesView, want: 200, check: isObject("Tenant", "production")},
		{name: "list node groups", method: "GET", path: "/api/v1/tenants/production/node-groups", min: rolesView, want: 200, check: isList(2)},
		{name: "get node group", method: "GET", path: "/api/v1/tenants/production/node-groups/workers", min: rolesView, want: 200, check: isObject("NodeGroup", "workers")},
		{name: "list patches", method: "GET", path: "/api/v1/tenants/production/patches", min: rolesView, want: 200, check: isList(2)},
		{name: "get patch", method: "GET", path: "/api/v1/tenants/production/patches/ntp", min: rolesView, want: 200, check: isObject("ConfigPatch", "ntp")},
		{name: "list tenant machines", method: "GET", path: "/api/v1/tenants/production/machines", min: rolesView, want: 200, check: isList(5)},
		{name: "get tenant machine", method: "GET", path: "/api/v1/tenants/production/machines/" + worker, min: rolesView, want: 200, check: isObject("Machine", worker)},
		{name: "list machines", method: "GET", path: "/api/v1/machines", min: rolesView, want: 200, check: isList(7)},
		{name: "get machine", method: "GET", path: "/api/v1/machines/" + cp, min: rolesView, want: 200, check: isObject("Machine", cp)},
		{name: "list providers", method: "GET", path: "/api/v1/providers", min: rolesView, want: 200, check: isList(1)},
		{name: "get provider", method: "GET", path: "/api/v1/providers/sim", min: rolesView, want: 200, check: isObject("Provider", "sim")},
		{name: "list commits", method: "GET", path: "/api/v1/commits", min: rolesView, want: 200, check: isList(1)},
		{name: "get commit", method: "GET", path: "/api/v1/commits/" + sha, min: rolesView, want: 200, check: isObject("Commit", sha)},
		{name: "status", method: "GET", path: "/api/v1/status", min: rolesView, want: 200, check: contains(`"reconciler"`)},
		{name: "metrics", method: "GET", path: "/metrics", min: rolesView, want: 200, check: contains("rezuscloud_tofu_duration_seconds")},
		{name: "rendered workspace", method: "GET", path: "/api/v1/tenants/production/rendered", min: rolesView, want: 200, check: contains("rezussim_machine")},
		{name: "watch machines (chunked JSON)", method: "GET", path: "/api/v1/machines?watch=true", min: rolesView, want: 200, watch: true, check: contains(`"type":"ADDED"`)},
		{name: "watch tenant (SSE)", method: "GET", path: "/api/v1/tenants/production/events?sse=true", min: rolesView, want: 200, watch: true, check: contains("data: {\"type\":\"ADDED\"")},
		{name: "watch node group", method: "GET", path: "/api/v1/tenants/production/node-groups/workers/events", min: rolesView, want: 200, watch: true, check: contains(`"kind":"NodeGroup"`)},
		{name: "watch provider", method: "GET", path: "/api/v1/providers/sim/events?sse=true", min: rolesView, want: 200, watch: true, check: contains(`"kind":"Provider"`)},
		{name: "watch commits (Accept: text/event-stream)", method: "GET", path: "/api/v1/commits/events", header: http.Header{"Accept": {"text/event-stream"}}, min: rolesView, want: 200, watch: true, check: contains(`"kind":"Commit"`)},

		{name: "PUT a tenant", method: "PUT", path: "/api/v1/tenants/production", body: static([]byte(`{}`)), min: rolesView, want: 405, check: readOnly},
		{name: "POST a tenant", method: "POST", path: "/api/v1/tenants", body: static([]byte(`{}`)), min: rolesView, want: 405, check: readOnly},
		{name: "DELETE a machine", method: "DELETE", path: "/api/v1/machines/" + worker, min: rolesView, want: 405, check: readOnly},
		{name: "PATCH a node group", method: "PATCH", path: "/api/v1/tenants/production/node-groups/workers", body: static([]byte(`{}`)), min: rolesView, want: 405, check: readOnly},

		// Hooks trust only their signature, never an API token; this server
		// has no webhook secret, so every hook is refused alike.
		{name: "webhook without a secret", method: "POST", path: "/hooks/generic", body: static([]byte(`{}`)), min: rolesOpen, want: 503, check: contains(`"reason":"InternalError"`)},

		{name: "preview", method: "POST", path: "/api/v1/previews", body: static(previewBody), header: http.Header{"Content-Type": {"application/json"}}, min: rolesEdit, want: 200, check: contains(`"valid":true`)},

		{name: "kubeconfig", method: "GET", path: "/api/v1/tenants/production/kubeconfig", min: rolesAdmin, want: 200, download: "kubeconfig", check: contains("client-certificate-data")},
		{name: "talosconfig", method: "GET", path: "/api/v1/tenants/production/talosconfig", min: rolesAdmin, want: 200, download: "talosconfig", check: contains("contexts:")},
		{name: "machine config", method: "GET", path: "/api/v1/tenants/production/machines/" + worker + "/config", min: rolesAdmin, want: 200, download: "machine config", secretBody: true, check: contains("machine:")},

		// A state holds the tenant's secrets: whoever runs tofu on it (edit,
		// as the reconciler's per-run tokens are) reads it, and with
		// encryption on what they read is ciphertext. View sees metadata.
		{name: "state GET", method: "GET", path: "/tfstate/production", min: rolesEdit, want: 200, check: contains(`"encrypted_data"`)},
		{name: "state GET of an earlier version", method: "GET", path: "/tfstate/production?version=1", min: rolesAdmin, want: 200, check: contains(`"serial"`)},
		{name: "state versions", method: "GET", path: "/api/v1/tfstate/production/versions", min: rolesView, want: 200, check: stateMetadata},
		{name: "state LOCK", method: "LOCK", path: "/tfstate/roles-scratch", body: lockBody, min: rolesEdit, want: 200},
		{name: "state POST under the lock", method: "POST", path: "/tfstate/roles-scratch?ID=", body: stateBody, min: rolesEdit, want: 200},
		{name: "state UNLOCK", method: "UNLOCK", path: "/tfstate/roles-scratch", body: lockBody, min: rolesEdit, want: 200},
		{name: "state DELETE", method: "DELETE", path: "/tfstate/roles-scratch", min: rolesEdit, want: 200},
		// An UNLOCK without the lock ID (terraform's force-unlock) is a
		// force-unlock, even of the caller's own lock: admin only.
		{name: "state LOCK of the caller's own state", method: "LOCK", path: "/tfstate/roles-force-{caller}", body: lockBody, min: rolesEdit, want: 200},
		{name: "state UNLOCK without the lock ID", method: "UNLOCK", path: "/tfstate/roles-force-{caller}", min: rolesAdmin, want: 200, forceUnlock: true},

		// Methods an endpoint does not serve get 405, before credentials.
		{name: "POST metrics", method: "POST", path: "/metrics", min: rolesOpen, want: 405, check: contains(`"reason":"MethodNotAllowed"`)},
		{name: "DELETE a kubeconfig", method: "DELETE", path: "/api/v1/tenants/production/kubeconfig", min: rolesOpen, want: 405, check: contains(`"reason":"MethodNotAllowed"`)},
	}
}

// rolesAPIError is the error body of every refused request.
type rolesAPIError struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Code    int    `json:"code"`
}

// try calls one endpoint as one caller and checks the answer.
func (r *rolesRun) try(c rolesCaller, rc rolesCase) {
	t := r.t
	t.Helper()
	path := strings.ReplaceAll(rc.path, "{caller}", rolesSlug(c))
	if strings.HasSuffix(path, "?ID=") {
		path += rolesLockID(c)
	}
	var body []byte
	if rc.body != nil {
		body = rc.body(c)
	}
	header := http.Header{}
	for k, v := range rc.header {
		header[k] = v
	}
	if rc.method == "POST" && strings.HasPrefix(path, "/tfstate/") || rc.method == "LOCK" || rc.method == "UNLOCK" {
		sum := md5.Sum(body)
		header.Set("Content-MD5", base64.StdEncoding.EncodeToString(sum[:]))
	}
	var code int
	var got []byte
	var hdr http.Header
	if rc.watch {
		code, got, hdr = r.watch(c, path, header)
	} else {
		code, got, hdr = r.callHeader(c, rc.method, path, body, header)
	}
	what := fmt.Sprintf("%s %s as %s", rc.method, path, c.name)
	if !rc.secretBody || code != rc.want {
		r.bodies = append(r.bodies, rolesBody{what, got})
	}
	if rc.download != "" && c.role != rolesNone {
		r.audited[c.token+" "+rc.download]++
	}
	if rc.download != "" && c.role == rolesNone {
		r.audited[rolesUnauthenticated+" "+rc.download]++
	}
	if rc.forceUnlock && c.role >= rc.min {
		r.audited[c.token+" force-unlock"]++
	}

	want, reason := rc.want, ""
	switch {
	case rc.min == rolesOpen:
	case c.role == rolesNone:
		want, reason = http.StatusUnauthorized, "Unauthorized"
	case c.role < rc.min:
		want, reason = http.StatusForbidden, "Forbidden"
	}
	if code != want {
		t.Errorf("%s (%s, needs %s): %d, want %d: %.300s", what, rc.name, rolesNames[rc.min], code, want, got)
		return
	}
	if reason == "" {
		if rc.check != nil {
			t.Run(rc.name+" as "+c.name, func(t *testing.T) { rc.check(t, got) })
		}
		return
	}
	var ae rolesAPIError
	if err := json.Unmarshal(got, &ae); err != nil || ae.Status != "failure" || ae.Reason != reason || ae.Code != want || ae.Message == "" {
		t.Errorf("%s: error body %s, want {\"status\":\"failure\",\"message\":…,\"reason\":%q,\"code\":%d}", what, got, reason, want)
	}
	if hdr.Get("Content-Type") != "application/json" {
		t.Errorf("%s: error Content-Type %q, want application/json", what, hdr.Get("Content-Type"))
	}
	if want == http.StatusUnauthorized && len(hdr.Values("WWW-Authenticate")) == 0 {
		t.Errorf("%s: 401 without WWW-Authenticate", what)
	}
	if want == http.StatusForbidden && !strings.Contains(ae.Message, c.token) {
		t.Errorf("%s: 403 message %q does not name the token %s", what, ae.Message, c.token)
	}
}

// call sends a request as caller c and returns the status code and body.
func (r *rolesRun) call(c rolesCaller, method, path string, body []byte, header http.Header) (int, []byte) {
	r.t.Helper()
	code, b, _ := r.callHeader(c, method, path, body, header)
	r.bodies = append(r.bodies, rolesBody{fmt.Sprintf("%s %s as %s", method, path, c.name), b})
	return code, b
}

func (r *rolesRun) callHeader(c rolesCaller, method, path string, body []byte, header http.Header) (int, []byte, http.Header) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.srv.URL()+path, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	for k, v := range c.auth {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, b, resp.Header
}

// watch opens a watch as caller c and reads it until the current state
// has ended (the initial BOOKMARK, or for SSE the first `id:` line without
// data), then hangs up. It returns what it read.
func (r *rolesRun) watch(c rolesCaller, path string, header http.Header) (int, []byte, http.Header) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.srv.URL()+path, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	for k, v := range c.auth {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("watch %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, resp.Header
	}
	var got bytes.Buffer
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	block := 0 // lines of the current SSE block that are not id: lines
	for sc.Scan() {
		line := sc.Text()
		got.WriteString(line + "\n")
		if !sse {
			if strings.Contains(line, `"type":"BOOKMARK"`) {
				return resp.StatusCode, got.Bytes(), resp.Header
			}
			continue
		}
		switch {
		case line == "":
			block = 0
		case strings.HasPrefix(line, "id: ") && block == 0:
			// An id line opens the block; it ends the current state if
			// no data follows before the blank line.
			if sc.Scan() {
				next := sc.Text()
				got.WriteString(next + "\n")
				if next == "" {
					return resp.StatusCode, got.Bytes(), resp.Header
				}
				block++
			}
		default:
			block++
		}
	}
	r.t.Errorf("watch %s as %s ended before its current state did (%v): %.500s", path, c.name, sc.Err(), got.String())
	return resp.StatusCode, got.Bytes(), resp.Header
}

// mustJSON GETs path as caller c and decodes the 200 answer into v.
func (r *rolesRun) mustJSON(c rolesCaller, path string, v any) {
	r.t.Helper()
	code, b := r.call(c, http.MethodGet, path, nil, nil)
	if code != http.StatusOK {
		r.t.Fatalf("GET %s as %s: %d %s", path, c.name, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		r.t.Fatalf("GET %s: decode: %v", path, err)
	}
}

// waitApplied is e2eServer.waitApplied with credentials.
func (r *rolesRun) waitApplied(c rolesCaller, sha string) schema.Commit {
	r.t.Helper()
	deadline := time.Now().Add(e2eTimeout)
	for {
		var st e2eStatus
		code, b, _ := r.callHeader(c, http.MethodGet, "/api/v1/status", nil, nil)
		if code != http.StatusOK {
			r.t.Fatalf("GET /api/v1/status as %s: %d %s", c.name, code, b)
		}
		if err := json.Unmarshal(b, &st); err != nil {
			r.t.Fatal(err)
		}
		var cm schema.Commit
		code, b, _ = r.callHeader(c, http.MethodGet, "/api/v1/commits/"+sha, nil, nil)
		if code == http.StatusOK {
			if err := json.Unmarshal(b, &cm); err != nil {
				r.t.Fatal(err)
			}
			if cm.Status.Phase.Done() && (cm.Status.Phase != schema.CommitSucceeded || st.Reconciler.LastAppliedCommit == sha) {
				return cm
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("commit %s not applied within %v", sha[:12], e2eTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rolesUnauthenticated is who the audit log's check calls a download
// attempt without valid credentials.
const rolesUnauthenticated = "(unauthenticated)"

// checkAudit compares the audit log with the download attempts made: those
// of tokens, or with unauth those without valid credentials.
func (r *rolesRun) checkAudit(t *testing.T, data string, unauth bool) {
	t.Helper()
	f, err := os.Open(filepath.Join(data, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]int{}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		var line struct {
			Time   time.Time `json:"time"`
			Msg    string    `json:"msg"`
			Who    string    `json:"who"`
			Role   string    `json:"role"`
			What   string    `json:"what"`
			Tenant string    `json:"tenant"`
			At     string    `json:"at"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Errorf("audit.log line %d is not JSON: %v: %s", n, err, sc.Bytes())
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, line.At)
		tenant := "production"
		if line.What == "force-unlock" {
			tenant = "roles-force-admin" // the admin's own scratch state
		}
		if err != nil || time.Since(at) > time.Hour || line.Tenant != tenant || line.What == "" {
			t.Errorf("audit.log line %d lacks who/what/when: %s", n, sc.Bytes())
		}
		who := line.Who
		if who == "" {
			who = rolesUnauthenticated
		}
		switch {
		case line.Msg == "download" && line.Role != "admin":
			t.Errorf("audit.log line %d: a download granted to role %q: %s", n, line.Role, sc.Bytes())
		case line.Msg == "download refused" && line.Role == "admin":
			t.Errorf("audit.log line %d: a download refused to an admin: %s", n, sc.Bytes())
		}
		got[who+" "+line.What]++
	}
	for k, want := range r.audited {
		switch {
		case strings.HasPrefix(k, rolesUnauthenticated) != unauth:
		case !unauth && got[k] != want:
			t.Errorf("audit.log has %d lines of %q, want one per attempt: %d", got[k], k, want)
		case unauth && (got[k] < 1 || got[k] > want):
			// Refusals from one client are bounded: the first in a minute
			// is written, the others counted in one line at its end.
			t.Errorf("audit.log has %d lines of %q, want the first of the %d attempts, and at most one more that counts the others", got[k], k, want)
		}
	}
	for k, n := range got {
		if _, ok := r.audited[k]; !ok && strings.HasPrefix(k, rolesUnauthenticated) == unauth {
			t.Errorf("audit.log has %d lines of %q, which made no attempt", n, k)
		}
	}
}

// rolesCreateToken runs `rezuscloud token create NAME --role ROLE` and
// returns the token and its tokens-file line.
func rolesCreateToken(t *testing.T, bin, name, role string) (token, line string) {
	t.Helper()
	out, err := exec.Command(bin, "token", "create", name, "--role", role).Output()
	if err != nil {
		t.Fatalf("rezuscloud token create %s: %v", name, err)
	}
	parts := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(parts) != 4 || !strings.HasPrefix(parts[0], "#") || !strings.HasPrefix(parts[2], "#") {
		t.Fatalf("rezuscloud token create printed %d lines, want a comment, the token, a comment, the line", len(parts))
	}
	if f := strings.Fields(parts[3]); len(f) != 3 || f[0] != name || f[1] != role {
		t.Fatalf("tokens-file line %q: want NAME ROLE HASH", parts[3])
	}
	if strings.Contains(parts[3], parts[1]) {
		t.Fatal("the tokens-file line holds the token itself")
	}
	return parts[1], parts[3]
}

// rolesLockID is the ID of the scratch state lock caller c takes.
func rolesLockID(c rolesCaller) string { return "roles-lock-" + strings.ReplaceAll(c.name, " ", "-") }

// rolesSlug is caller c's name as part of a state name.
func rolesSlug(c rolesCaller) string {
	slug := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(c.name))
	return strings.Trim(strings.Join(strings.FieldsFunc(slug, func(r rune) bool { return r == '-' }), "-"), "-")
}

func rolesBearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

func rolesBasic(user, pass string) http.Header {
	return http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))}}
}

// rolesNeedles returns the secrets of a bundle as they would show up
// anywhere: each private key as PEM and as the base64 of its PEM (the form
// configs and kubeconfigs use), the tokens and the encryption secrets, and
// the state passphrase.
func rolesNeedles(t *testing.T, bundle []byte) map[string]string {
	t.Helper()
	b, err := talos.ParseSecrets(bundle)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{"state passphrase": rolesPassphrase}
	key := func(what string, pemKey []byte) {
		blk, _ := pem.Decode(pemKey)
		if blk == nil || !strings.Contains(blk.Type, "PRIVATE KEY") {
			t.Fatalf("%s is not a PEM private key", what)
		}
		// A line of the key's base64 body, and the start of the base64 of
		// the whole PEM past its common header.
		body := strings.Split(string(pemKey), "\n")[1]
		out[what+" key"] = body
		full := base64.StdEncoding.EncodeToString(pemKey)
		out[what+" key (base64 PEM)"] = full[len(full)/2 : len(full)/2+40]
	}
	key("Kubernetes CA", b.Certs.K8s.Key)
	key("etcd CA", b.Certs.Etcd.Key)
	key("aggregator CA", b.Certs.K8sAggregator.Key)
	key("service account", b.Certs.K8sServiceAccount.Key)
	key("Talos API CA", b.Certs.OS.Key)
	for what, v := range map[string]string{
		"bootstrap token":  b.Secrets.BootstrapToken,
		"secretbox secret": b.Secrets.SecretboxEncryptionSecret,
		"aescbc secret":    b.Secrets.AESCBCEncryptionSecret,
		"trustd token":     b.TrustdInfo.Token,
		"cluster secret":   b.Cluster.Secret,
	} {
		if v != "" {
			out[what] = v
		}
	}
	for _, must := range []string{"bootstrap token", "secretbox secret", "trustd token", "cluster secret"} {
		if out[must] == "" {
			t.Fatalf("the bundle has no %s", must)
		}
	}
	return out
}

// rolesVerifyKubeconfig checks that a kubeconfig trusts the Kubernetes CA
// and that its client certificate, CN admin in system:masters, is signed by
// that CA for client auth.
func rolesVerifyKubeconfig(t *testing.T, kc, caPEM []byte) {
	t.Helper()
	var cfg struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
				CAData string `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				CertData string `json:"client-certificate-data"`
				KeyData  string `json:"client-key-data"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal(kc, &cfg); err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	if len(cfg.Clusters) != 1 || len(cfg.Users) != 1 {
		t.Fatalf("kubeconfig has %d clusters and %d users, want 1 and 1", len(cfg.Clusters), len(cfg.Users))
	}
	if cfg.Clusters[0].Cluster.Server != "https://127.250.0.1:6443" {
		t.Errorf("kubeconfig server %q", cfg.Clusters[0].Cluster.Server)
	}
	caData, err := base64.StdEncoding.DecodeString(cfg.Clusters[0].Cluster.CAData)
	if err != nil || !bytes.Equal(bytes.TrimSpace(caData), bytes.TrimSpace(caPEM)) {
		t.Errorf("kubeconfig's certificate-authority-data is not the Kubernetes CA of the state (%v)", err)
	}
	crt := rolesCert(t, "kubeconfig client certificate", cfg.Users[0].User.CertData)
	if err := rolesVerify(crt, caPEM, x509.ExtKeyUsageClientAuth); err != nil {
		t.Fatalf("kubeconfig client certificate does not verify against the state's Kubernetes CA: %v", err)
	}
	if crt.Subject.CommonName != "admin" || len(crt.Subject.Organization) != 1 || crt.Subject.Organization[0] != "system:masters" {
		t.Errorf("kubeconfig client certificate subject %v, want CN=admin, O=system:masters", crt.Subject)
	}
	if _, err := base64.StdEncoding.DecodeString(cfg.Users[0].User.KeyData); err != nil || cfg.Users[0].User.KeyData == "" {
		t.Errorf("kubeconfig has no client key: %v", err)
	}
}

// rolesVerifyTalosconfig checks that a talosconfig's client certificate
// is signed by the Talos API CA.
func rolesVerifyTalosconfig(t *testing.T, tc, caPEM []byte) {
	t.Helper()
	var cfg struct {
		Context  string `json:"context"`
		Contexts map[string]struct {
			Endpoints []string `json:"endpoints"`
			CA        string   `json:"ca"`
			Crt       string   `json:"crt"`
		} `json:"contexts"`
	}
	if err := yaml.Unmarshal(tc, &cfg); err != nil {
		t.Fatalf("talosconfig: %v", err)
	}
	ctx, ok := cfg.Contexts[cfg.Context]
	if !ok {
		t.Fatalf("talosconfig has no context %q", cfg.Context)
	}
	if len(ctx.Endpoints) != 3 {
		t.Errorf("talosconfig endpoints %v, want the 3 control-plane machines", ctx.Endpoints)
	}
	crt := rolesCert(t, "talosconfig client certificate", ctx.Crt)
	if err := rolesVerify(crt, caPEM, x509.ExtKeyUsageClientAuth); err != nil {
		t.Fatalf("talosconfig client certificate does not verify against the state's Talos API CA: %v", err)
	}
}

func rolesCert(t *testing.T, what, b64 string) *x509.Certificate {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	blk, _ := pem.Decode(raw)
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("%s is not a PEM certificate", what)
	}
	crt, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return crt
}

func rolesVerify(crt *x509.Certificate, caPEM []byte, usage x509.ExtKeyUsage) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("the CA is not a PEM certificate")
	}
	_, err := crt.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}
