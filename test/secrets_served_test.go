package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
)

// servedPassphrase encrypts the states of TestBundleNeitherServedNorStored.
const servedPassphrase = "served-passphrase-0123456789"

// bundleNeedles returns every value of a Talos secrets bundle, by name, in
// the forms text carries it: each certificate and key as the base64 of its
// PEM (as the bundle and Talos configs hold it), a piece of that, and each
// line of its PEM body (lines of two certificates made in the same second
// may be the same); the tokens whole and their secret part; the
// encryption secret; the cluster ID and secret.
func bundleNeedles(t *testing.T, bundle []byte) map[string]string {
	t.Helper()
	b, err := talos.ParseSecrets(bundle)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	pemForms := func(what string, p []byte) {
		if len(p) == 0 {
			return
		}
		full := base64.StdEncoding.EncodeToString(p)
		out[what+" (base64 PEM)"] = full
		// The piece is of the signature or the key: what comes before in a
		// certificate may be the same in two tenants' certificates.
		out[what+" (a piece of its base64 PEM)"] = full[len(full)-100 : len(full)-60]
		for i, l := range strings.Split(string(p), "\n") {
			if len(l) >= 40 && !strings.HasPrefix(l, "-----") {
				out[fmt.Sprintf("%s (PEM line %d)", what, i)] = l
			}
		}
	}
	for what, pair := range map[string][2][]byte{
		"etcd CA":       {b.Certs.Etcd.Crt, b.Certs.Etcd.Key},
		"Kubernetes CA": {b.Certs.K8s.Crt, b.Certs.K8s.Key},
		"aggregator CA": {b.Certs.K8sAggregator.Crt, b.Certs.K8sAggregator.Key},
		"Talos API CA":  {b.Certs.OS.Crt, b.Certs.OS.Key},
	} {
		pemForms(what+" certificate", pair[0])
		pemForms(what+" key", pair[1])
	}
	pemForms("service account key", b.Certs.K8sServiceAccount.Key)
	for what, v := range map[string]string{
		"bootstrap token":  b.Secrets.BootstrapToken,
		"trustd token":     b.TrustdInfo.Token,
		"secretbox secret": b.Secrets.SecretboxEncryptionSecret,
		"aescbc secret":    b.Secrets.AESCBCEncryptionSecret,
		"cluster ID":       b.Cluster.ID,
		"cluster secret":   b.Cluster.Secret,
	} {
		if v == "" {
			continue
		}
		out[what] = v
		if _, secret, ok := strings.Cut(v, "."); ok && strings.HasSuffix(what, "token") {
			out[what+" (its secret)"] = secret
		}
	}
	if len(out) < 40 {
		t.Fatalf("the bundle gives only %d needles", len(out))
	}
	return out
}

// findNeedles returns the names of the needles text holds, sorted.
func findNeedles(text []byte, needles map[string]string) []string {
	var out []string
	for what, n := range needles {
		if bytes.Contains(text, []byte(n)) {
			out = append(out, what)
		}
	}
	sort.Strings(out)
	return out
}

// servedAnswers fetches, with auth, every object and list of the read API
// there is, the downloads and the status, and returns each answer's body by
// path.
func servedAnswers(t *testing.T, s *e2eServer, auth http.Header, gone ...string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	get := func(path string) []byte {
		_, body := s.Request(http.MethodGet, path, nil, auth)
		out[path] = body
		return body
	}
	names := func(list string) []string {
		var l struct {
			Items []struct {
				Metadata schema.ObjectMeta `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal(get(list+"?limit=1000"), &l); err != nil {
			t.Fatalf("GET %s: %v", list, err)
		}
		var n []string
		for _, it := range l.Items {
			n = append(n, it.Metadata.Name)
		}
		return n
	}
	for _, p := range []string{"/api/v1/status", "/version", "/healthz", "/readyz"} {
		get(p)
	}
	for _, list := range []string{"/api/v1/machines", "/api/v1/providers", "/api/v1/commits"} {
		for _, n := range names(list) {
			get(list + "/" + n)
		}
	}
	for _, tenant := range append(names("/api/v1/tenants"), gone...) {
		base := "/api/v1/tenants/" + tenant
		for _, p := range []string{"", "/rendered", "/kubeconfig", "/talosconfig"} {
			get(base + p)
		}
		for _, sub := range []string{"/node-groups", "/patches", "/machines"} {
			for _, n := range names(base + sub) {
				get(base + sub + "/" + n)
				if sub == "/machines" {
					get(base + sub + "/" + n + "/config")
				}
			}
		}
	}
	return out
}

// servedWatches reads, with auth, the kept history of every watch of
// commits, tenants and machines, in chunked JSON and as Server-Sent
// Events, from the first resourceVersion to the first heartbeat: the
// BOOKMARK (a comment in SSE) that says the client has every event so far.
func servedWatches(t *testing.T, s *e2eServer, auth http.Header, tenants ...string) map[string][]byte {
	t.Helper()
	paths := []string{
		"/api/v1/commits/events?resourceVersion=0",
		"/api/v1/commits?watch=true&sse=true&resourceVersion=0",
		"/api/v1/tenants?watch=true&resourceVersion=0",
		"/api/v1/machines/events?resourceVersion=0",
	}
	for _, tenant := range tenants {
		paths = append(paths, "/api/v1/tenants/"+tenant+"/events?resourceVersion=0", "/api/v1/tenants/"+tenant+"/events?sse=true&resourceVersion=0")
	}
	out := map[string][]byte{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, len(paths))
	for _, p := range paths {
		wg.Go(func() {
			b, err := readWatchHistory(s.URL()+p, auth)
			if err != nil {
				errs <- fmt.Errorf("watch %s: %w", p, err)
				return
			}
			mu.Lock()
			out[p] = b
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return out
}

// readWatchHistory reads a watch until its first heartbeat.
func readWatchHistory(url string, auth http.Header) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header = auth.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("answered %s", resp.Status)
	}
	var buf bytes.Buffer
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte(`{"type":"BOOKMARK"`)) || bytes.HasPrefix(line, []byte(": heartbeat")) {
			return buf.Bytes(), nil
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	return nil, fmt.Errorf("ended before a heartbeat (%v)", sc.Err())
}

// commitFailures counts, in a chunked-JSON watch of commits, the events of
// commit sha that record tenant as failed with tofu output.
func commitFailures(t *testing.T, watch []byte, sha, tenant string) int {
	t.Helper()
	n := 0
	for _, line := range bytes.Split(bytes.TrimSpace(watch), []byte("\n")) {
		var ev struct {
			Object schema.Commit `json:"object"`
		}
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("commit watch line: %v", err)
		}
		if ev.Object.Spec.SHA != sha {
			continue
		}
		for _, r := range ev.Object.Status.Tenants {
			if r.Tenant == tenant && r.Phase == schema.CommitFailed && r.OutputTail != "" {
				n++
			}
		}
	}
	return n
}

// TestBundleNeitherServedNorStored runs the server with state encryption
// on, and a simulated cloud that fails one machine change when told to,
// through a tenant's failed apply and its retry, then its failed destroy
// and the destroy that follows. Afterwards no value of either tenant's
// secrets bundle (decrypted from their states before) is in any answer a
// view token gets (every object and list, the status, downloads, the
// commits' records, every watch's kept history, chunked and SSE), in the
// server's log, or in any file of the data dir, the store's included.
func TestBundleNeitherServedNorStored(t *testing.T) {
	tokens := crashTokens(t)
	view := http.Header{"Authorization": {"Bearer " + appendToken(t, tokens, "viewer", backend.RoleView)}}
	admin := appendToken(t, tokens, "state-reader", backend.RoleAdmin)
	e := newE2E(t, e2eOptions{
		args: []string{"--tokens-file", tokens, "--retry-base", "1s", "--retry-max", "2s"},
		env:  []string{"REZUSCLOUD_STATE_PASSPHRASE=" + servedPassphrase},
	})
	s := e.srv
	needles := map[string]string{}
	for _, tenant := range []string{"production", "staging"} {
		plain := e2ePullState(t, s.URL(), tenant, "state-reader", admin, servedPassphrase)
		for what, n := range bundleNeedles(t, e2eBundle(t, plain)) {
			needles[tenant+" "+what] = n
		}
	}
	cloud, err := sim.Open(e.data + "-sim")
	if err != nil {
		t.Fatal(err)
	}
	applied := func(sha string) {
		t.Helper()
		s.WaitFor("commit "+sha[:12]+" to be applied after its retry", func() bool {
			return s.status().Reconciler.LastAppliedCommit == sha
		})
	}

	// An apply that the cloud fails, and its retry.
	if err := cloud.FailNext(1); err != nil {
		t.Fatal(err)
	}
	e.setCount("staging", "workers", 2)
	scaled := e.push("Scale staging workers to 2")
	applied(scaled)

	// A destroy that the cloud fails, and its retry.
	if err := cloud.FailNext(1); err != nil {
		t.Fatal(err)
	}
	e.work.Remove("clusters/staging")
	removed := e.push("Remove staging")
	applied(removed)
	s.WaitFor("staging to be gone", func() bool { return s.Get("/api/v1/tenants/staging", nil) == http.StatusNotFound })

	answers := servedAnswers(t, s, view, "staging")
	watches := servedWatches(t, s, view, "production", "staging")
	commits := watches["/api/v1/commits/events?resourceVersion=0"]
	for sha, what := range map[string]string{scaled: "apply", removed: "destroy"} {
		if commitFailures(t, commits, sha, "staging") == 0 {
			t.Errorf("no record shows staging's %s failed: the test would prove nothing of a failed %s", what, what)
		}
	}
	for path, body := range answers {
		if found := findNeedles(body, needles); len(found) > 0 {
			t.Errorf("GET %s as a viewer serves %s", path, strings.Join(found, ", "))
		}
	}
	for path, body := range watches {
		if len(body) == 0 {
			t.Errorf("watch %s replayed nothing", path)
		}
		if found := findNeedles(body, needles); len(found) > 0 {
			t.Errorf("watch %s as a viewer serves %s", path, strings.Join(found, ", "))
		}
	}
	if found := findNeedles([]byte(s.Log()), needles); len(found) > 0 {
		t.Errorf("the server's log holds %s", strings.Join(found, ", "))
	}
	files := 0
	walkAtRest(t, e.data, func(rel string, b []byte) {
		files++
		if found := findNeedles(b, needles); len(found) > 0 {
			t.Errorf("%s holds %s at rest", rel, strings.Join(found, ", "))
		}
	})
	if _, err := os.Stat(filepath.Join(e.data, "rezuscloud.db")); err != nil || files < 10 {
		t.Fatalf("read %d files of the data dir, the store among them (%v)", files, err)
	}
	watched := 0
	for _, b := range watches {
		watched += len(b)
	}
	t.Logf("looked for %d values of the bundles in %d answers, %d watches (%d bytes of events), the log and %d files",
		len(needles), len(answers), len(watches), watched, files)
}
