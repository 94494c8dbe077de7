package kubeapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/render/talos"
	"sigs.k8s.io/yaml"
)

// tenant is a simulated tenant's control plane for a test: a Talos secrets
// bundle made as the reconciler makes one, and a loopback address of its
// own.
type tenant struct {
	bundle []byte
	opts   Options
}

func newTenant(t *testing.T) *tenant {
	t.Helper()
	bundle, err := talos.GenerateSecrets("v1.12.6", time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := talos.ParseSecrets(bundle)
	if err != nil {
		t.Fatal(err)
	}
	var r [2]byte
	_, _ = rand.Read(r[:])
	addr := netip.AddrFrom4([4]byte{127, 252, r[0], r[1]%250 + 1})
	return &tenant{bundle: bundle, opts: Options{
		Bin: testenv.KubeBin(t), Dir: t.TempDir(), Address: addr,
		CA: b.Certs.K8s, ServiceAccountKey: b.Certs.K8sServiceAccount.Key,
	}}
}

// admin is an HTTP client with the admin kubeconfig that the server hands
// out for the tenant (render/talos.Kubeconfig), read as kubectl reads it.
func (tn *tenant) admin(t *testing.T, c *ControlPlane) (*http.Client, []byte) {
	t.Helper()
	kc, err := talos.Kubeconfig("sim-tenant", c.URL(), tn.bundle, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
				CA     []byte `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				Crt []byte `json:"client-certificate-data"`
				Key []byte `json:"client-key-data"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal(kc, &cfg); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(cfg.Users[0].User.Crt, cfg.Users[0].User.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cfg.Clusters[0].Cluster.CA)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}}}
	t.Cleanup(client.CloseIdleConnections)
	return client, kc
}

// call sends body (JSON) to the API and returns the status and the answer.
func call(t *testing.T, c *http.Client, method, url string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, r)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestControlPlane starts a tenant's control plane from its Talos secrets
// and talks to it as its users would: the admin kubeconfig the server
// derives from the bundle is accepted (and a client certificate of another
// CA is not), the API reports the release it was built from, the
// controller-manager fills a PodDisruptionBudget's status, and kubectl
// lists what the test made. Stopped, it leaves nothing listening; started
// again over its directory, it serves the same objects.
func TestControlPlane(t *testing.T) {
	tn := newTenant(t)
	ctx := context.Background()
	start := time.Now()
	c, err := Start(ctx, tn.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	t.Logf("control plane on %s ready in %s", c.URL(), time.Since(start).Round(time.Millisecond))
	admin, kc := tn.admin(t, c)

	if code, b := call(t, admin, http.MethodGet, c.URL()+"/version", nil); code != http.StatusOK || !strings.Contains(string(b), `"gitVersion": "v1.37.2"`) {
		t.Errorf("GET /version: %d %s, want v1.37.2", code, b)
	}
	ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "shop"}}
	if code, b := call(t, admin, http.MethodPost, c.URL()+"/api/v1/namespaces", ns); code != http.StatusCreated {
		t.Fatalf("create a namespace as admin: %d %s", code, b)
	}

	// A client certificate of another CA is refused.
	stranger := newTenant(t)
	other, _ := stranger.admin(t, c)
	other.Transport.(*http.Transport).TLSClientConfig.RootCAs = admin.Transport.(*http.Transport).TLSClientConfig.RootCAs
	if code, b := call(t, other, http.MethodGet, c.URL()+"/api/v1/namespaces", nil); code != http.StatusUnauthorized {
		t.Errorf("a client of another cluster's CA: %d %s, want 401", code, b)
	}

	pdb := map[string]any{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
		"metadata": map[string]any{"name": "web", "namespace": "shop"},
		"spec":     map[string]any{"minAvailable": 2, "selector": map[string]any{"matchLabels": map[string]string{"app": "web"}}}}
	if code, b := call(t, admin, http.MethodPost, c.URL()+"/apis/policy/v1/namespaces/shop/poddisruptionbudgets", pdb); code != http.StatusCreated {
		t.Fatalf("create a PodDisruptionBudget: %d %s", code, b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, b := call(t, admin, http.MethodGet, c.URL()+"/apis/policy/v1/namespaces/shop/poddisruptionbudgets/web", nil)
		var got struct {
			Status struct {
				ObservedGeneration int64 `json:"observedGeneration"`
				DesiredHealthy     int   `json:"desiredHealthy"`
			} `json:"status"`
		}
		_ = json.Unmarshal(b, &got)
		if got.Status.ObservedGeneration == 1 && got.Status.DesiredHealthy == 2 {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(tn.opts.Dir, "kube-controller-manager.log"))
			t.Fatalf("the controller-manager never filled the budget's status: %s\ncontroller-manager's log:\n%s", b, tail(log, 40))
		}
		time.Sleep(100 * time.Millisecond)
	}

	for name, pid := range c.Pids() {
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for _, l := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				t.Logf("%s: %s", name, strings.Join(strings.Fields(l), " "))
			}
		}
	}
	kcPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(tn.opts.Bin, "kubectl"), "--kubeconfig", kcPath, "get", "namespaces", "-o", "name").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "namespace/shop") {
		t.Errorf("kubectl get namespaces: %v\n%s", err, out)
	}

	c.Stop()
	for _, port := range []int{tn.opts.Port, EtcdClientPort, EtcdPeerPort, ControllerManagerPort} {
		addr := net.JoinHostPort(tn.opts.Address.String(), fmt.Sprint(port))
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s answers after Stop", addr)
		}
	}

	c, err = Start(ctx, tn.opts)
	if err != nil {
		t.Fatalf("start again over the same directory: %v", err)
	}
	t.Cleanup(c.Stop)
	admin, _ = tn.admin(t, c)
	if code, b := call(t, admin, http.MethodGet, c.URL()+"/api/v1/namespaces/shop", nil); code != http.StatusOK {
		t.Errorf("namespace shop after a restart: %d %s", code, b)
	}
}

// TestStartRefuses: a control plane is never started on an address outside
// loopback, nor without the cluster's keys.
func TestStartRefuses(t *testing.T) {
	for _, o := range []Options{
		{Bin: "b", Dir: "d", Address: netip.MustParseAddr("10.0.0.1")},
		{Bin: "b", Dir: "d", Address: netip.MustParseAddr("::1")},
		{Bin: "b", Dir: "d", Address: netip.MustParseAddr("127.0.0.2")},
		{Dir: "d", Address: netip.MustParseAddr("127.0.0.2")},
	} {
		if _, err := Start(context.Background(), o); err == nil {
			t.Errorf("Start(%+v) started", o)
		}
	}
}

// tail is the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestEtcdSnapshotRestore: a snapshot of the control plane's etcd,
// restored with RestoreEtcd over its directory, brings back what the API
// held when it was taken and nothing written after; a file that is not a
// snapshot is refused.
func TestEtcdSnapshotRestore(t *testing.T) {
	tn := newTenant(t)
	ctx := context.Background()
	c, err := Start(ctx, tn.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	admin, _ := tn.admin(t, c)
	ns := func(name string) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}
	}
	if code, b := call(t, admin, http.MethodPost, c.URL()+"/api/v1/namespaces", ns("kept")); code != http.StatusCreated {
		t.Fatalf("create a namespace: %d %s", code, b)
	}
	rc, err := c.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "etcd.snapshot")
	if err := os.WriteFile(file, snap, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, b := call(t, admin, http.MethodPost, c.URL()+"/api/v1/namespaces", ns("later")); code != http.StatusCreated {
		t.Fatalf("create a namespace: %d %s", code, b)
	}
	c.Stop()

	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, bytes.Repeat([]byte("not a snapshot "), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RestoreEtcd(ctx, tn.opts, garbage); err == nil {
		t.Fatal("RestoreEtcd of garbage")
	}
	if err := RestoreEtcd(ctx, tn.opts, file); err != nil {
		t.Fatal(err)
	}
	c, err = Start(ctx, tn.opts)
	if err != nil {
		t.Fatalf("start over the restored etcd: %v", err)
	}
	t.Cleanup(c.Stop)
	admin, _ = tn.admin(t, c)
	if code, b := call(t, admin, http.MethodGet, c.URL()+"/api/v1/namespaces/kept", nil); code != http.StatusOK {
		t.Errorf("namespace kept after the restore: %d %s", code, b)
	}
	if code, _ := call(t, admin, http.MethodGet, c.URL()+"/api/v1/namespaces/later", nil); code != http.StatusNotFound {
		t.Errorf("namespace later, made after the snapshot, after the restore: %d, want 404", code)
	}
}
