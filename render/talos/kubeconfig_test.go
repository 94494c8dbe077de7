package talos

import (
	"bytes"
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"sigs.k8s.io/yaml"
)

// parsedKubeconfig is how kubectl reads a kubeconfig, written here
// independently of the package's own types.
type parsedKubeconfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Clusters   []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server string `json:"server"`
			CA     []byte `json:"certificate-authority-data"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Cert []byte `json:"client-certificate-data"`
			Key  []byte `json:"client-key-data"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster   string `json:"cluster"`
			User      string `json:"user"`
			Namespace string `json:"namespace"`
		} `json:"context"`
	} `json:"contexts"`
	CurrentContext string `json:"current-context"`
}

func parseKubeconfig(t *testing.T, b []byte) parsedKubeconfig {
	t.Helper()
	var kc parsedKubeconfig
	if err := yaml.UnmarshalStrict(b, &kc); err != nil {
		t.Fatalf("kubeconfig does not parse: %v", err)
	}
	if len(kc.Clusters) != 1 || len(kc.Users) != 1 || len(kc.Contexts) != 1 {
		t.Fatalf("kubeconfig has %d clusters, %d users, %d contexts; want one each", len(kc.Clusters), len(kc.Users), len(kc.Contexts))
	}
	return kc
}

func TestKubeconfig(t *testing.T) {
	b := testSecrets(t)
	const validity = 72 * time.Hour
	out, err := Kubeconfig("alpha", "https://10.0.0.10:6443", b, validity, testNow)
	if err != nil {
		t.Fatalf("Kubeconfig: %v", err)
	}
	kc := parseKubeconfig(t, out)
	if kc.APIVersion != "v1" || kc.Kind != "Config" {
		t.Errorf("apiVersion/kind = %s/%s", kc.APIVersion, kc.Kind)
	}
	cl, u, ctx := kc.Clusters[0], kc.Users[0], kc.Contexts[0]
	if cl.Name != "alpha" || cl.Cluster.Server != "https://10.0.0.10:6443" {
		t.Errorf("cluster = %s at %s", cl.Name, cl.Cluster.Server)
	}
	if u.Name != "admin@alpha" || ctx.Name != "admin@alpha" || kc.CurrentContext != "admin@alpha" || ctx.Context.Cluster != "alpha" || ctx.Context.User != "admin@alpha" {
		t.Errorf("names: user %s, context %s -> %s/%s, current %s", u.Name, ctx.Name, ctx.Context.Cluster, ctx.Context.User, kc.CurrentContext)
	}

	k8sCA, osCA, err := CACertificates(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cl.Cluster.CA, k8sCA) {
		t.Error("certificate-authority-data is not the bundle's Kubernetes CA")
	}
	crt := parsePEMCert(t, "client certificate", u.User.Cert)
	if crt.Subject.CommonName != "admin" || !slices.Equal(crt.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("subject = CN %q O %v", crt.Subject.CommonName, crt.Subject.Organization)
	}
	if !crt.NotBefore.Equal(testNow) || !crt.NotAfter.Equal(testNow.Add(validity)) {
		t.Errorf("valid %s to %s, want %s to %s", crt.NotBefore, crt.NotAfter, testNow, testNow.Add(validity))
	}
	verify := func(roots []byte, at time.Time) error {
		_, err := crt.Verify(stdx509.VerifyOptions{
			Roots:       certPool(t, "CA", roots),
			CurrentTime: at,
			KeyUsages:   []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth},
		})
		return err
	}
	if err := verify(k8sCA, testNow.Add(time.Hour)); err != nil {
		t.Errorf("client certificate does not verify against the Kubernetes CA: %v", err)
	}
	if err := verify(osCA, testNow.Add(time.Hour)); err == nil {
		t.Error("client certificate verifies against the OS CA")
	}
	if err := verify(k8sCA, testNow.Add(validity+time.Minute)); err == nil {
		t.Error("client certificate verifies after it expired")
	}
	if _, err := tls.X509KeyPair(u.User.Cert, u.User.Key); err != nil {
		t.Errorf("client key does not match its certificate: %v", err)
	}

	// A new key per call, the same CA.
	again, err := Kubeconfig("alpha", "https://10.0.0.10:6443", b, validity, testNow)
	if err != nil {
		t.Fatal(err)
	}
	kc2 := parseKubeconfig(t, again)
	if bytes.Equal(kc2.Users[0].User.Key, u.User.Key) {
		t.Error("two kubeconfigs share a client key")
	}
	if !bytes.Equal(kc2.Clusters[0].Cluster.CA, cl.Cluster.CA) {
		t.Error("two kubeconfigs of one bundle trust different CAs")
	}
}

func TestKubeconfigErrors(t *testing.T) {
	b := testSecrets(t)
	for _, tc := range []struct {
		name, cluster, endpoint string
		bundle                  []byte
		validity                time.Duration
		want                    string
	}{
		{"no cluster", "", "https://x:6443", b, time.Hour, "kubeconfig: cluster name: empty"},
		{"no endpoint", "a", "", b, time.Hour, "kubeconfig: endpoint: empty"},
		{"zero validity", "a", "https://x:6443", b, 0, "kubeconfig: validity 0s: must be positive"},
		{"no bundle", "a", "https://x:6443", nil, time.Hour, "kubeconfig: secrets bundle: empty"},
	} {
		_, err := Kubeconfig(tc.cluster, tc.endpoint, tc.bundle, tc.validity, testNow)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// apiServer is an HTTPS server on loopback standing in for a Kubernetes API
// server of the bundle's cluster.
func apiServer(t *testing.T, bundle []byte) *httptest.Server {
	t.Helper()
	parsed, err := ParseSecrets(bundle)
	if err != nil {
		t.Fatal(err)
	}
	return mtlsServer(t, parsed.Certs.K8s)
}

// mtlsServer is an HTTPS server on loopback whose certificate is signed by
// ca and which admits only clients with a certificate from ca. It answers
// /version and says which client it saw.
func mtlsServer(t *testing.T, caPair *x509.PEMEncodedCertificateAndKey) *httptest.Server {
	t.Helper()
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(caPair)
	if err != nil {
		t.Fatal(err)
	}
	server, err := x509.NewKeyPair(ca,
		x509.CommonName("server"),
		x509.IPAddresses([]net.IP{net.ParseIP("127.0.0.1")}),
		x509.NotAfter(time.Now().Add(time.Hour)),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
	)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			http.NotFound(w, r)
			return
		}
		peer := r.TLS.PeerCertificates[0]
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"major":"1","minor":"34","gitVersion":"v1.34.1","platform":%q}`, peer.Subject.CommonName+"/"+strings.Join(peer.Subject.Organization, ","))
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{*server.Certificate},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    certPool(t, "client CA", caPair.Crt),
		MinVersion:   tls.VersionTLS12,
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// mtlsGet fetches /version from srv as the client with the given PEM
// certificate and key, trusting the PEM CA, and returns what the server
// says of the client.
func mtlsGet(t *testing.T, url string, caPEM, crtPEM, keyPEM []byte) (string, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: certPool(t, "CA", caPEM), MinVersion: tls.VersionTLS12}
	if crtPEM != nil {
		pair, err := tls.X509KeyPair(crtPEM, keyPEM)
		if err != nil {
			return "", err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := client.Get(url + "/version")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	var v struct{ Platform string }
	if err := json.Unmarshal(body, &v); err != nil {
		return "", fmt.Errorf("%w: %s", err, body)
	}
	return v.Platform, nil
}

// TestKubeconfigTLS uses the kubeconfig the way a client does: it trusts
// the server through certificate-authority-data and authenticates with the
// client certificate, against a server that checks both.
func TestKubeconfigTLS(t *testing.T) {
	b := testSecrets(t)
	srv := apiServer(t, b)
	out, err := Kubeconfig("alpha", srv.URL, b, time.Hour, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	kc := parseKubeconfig(t, out)
	cl, u := kc.Clusters[0].Cluster, kc.Users[0].User
	got, err := mtlsGet(t, cl.Server, cl.CA, u.Cert, u.Key)
	if err != nil {
		t.Fatalf("GET /version with the kubeconfig: %v", err)
	}
	if got != "admin/system:masters" {
		t.Errorf("server saw client %q, want admin/system:masters", got)
	}
	// Without the client certificate the server refuses the connection.
	if _, err := mtlsGet(t, cl.Server, cl.CA, nil, nil); err == nil {
		t.Error("the server admitted a client without a certificate")
	}
}

// TestKubeconfigKubectl hands the kubeconfig to kubectl, when the machine
// has it, and has kubectl call the loopback API server.
func TestKubeconfigKubectl(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed")
	}
	b := testSecrets(t)
	srv := apiServer(t, b)
	out, err := Kubeconfig("alpha", srv.URL, b, time.Hour, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", path, "get", "--raw", "/version")
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl: %v\n%s", err, got)
	}
	if !strings.Contains(string(got), `"platform":"admin/system:masters"`) {
		t.Errorf("kubectl printed %s", got)
	}
}
