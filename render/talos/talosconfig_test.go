package talos

import (
	"bytes"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/base64"
	"slices"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
)

func TestTalosconfig(t *testing.T) {
	b := testSecrets(t)
	endpoints := []string{"10.0.0.11", "10.0.0.12"}
	out, err := Talosconfig("alpha", endpoints, b, testNow)
	if err != nil {
		t.Fatalf("Talosconfig: %v", err)
	}
	cfg, err := clientconfig.FromBytes(out)
	if err != nil {
		t.Fatalf("talosconfig does not parse: %v", err)
	}
	if cfg.Context != "alpha" || len(cfg.Contexts) != 1 {
		t.Fatalf("context = %q of %d", cfg.Context, len(cfg.Contexts))
	}
	ctx := cfg.Contexts["alpha"]
	if ctx == nil {
		t.Fatal("no context named alpha")
	}
	if !slices.Equal(ctx.Endpoints, endpoints) {
		t.Errorf("endpoints = %v", ctx.Endpoints)
	}

	decode := func(what, s string) []byte {
		t.Helper()
		d, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return d
	}
	caPEM, crtPEM, keyPEM := decode("ca", ctx.CA), decode("crt", ctx.Crt), decode("key", ctx.Key)
	k8sCA, osCA, err := CACertificates(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(caPEM, osCA) {
		t.Error("talosconfig CA is not the bundle's OS CA")
	}
	if _, err := tls.X509KeyPair(crtPEM, keyPEM); err != nil {
		t.Errorf("client key does not match its certificate: %v", err)
	}
	crt := parsePEMCert(t, "client certificate", crtPEM)
	if !slices.Equal(crt.Subject.Organization, []string{"os:admin"}) {
		t.Errorf("roles = %v, want [os:admin]", crt.Subject.Organization)
	}
	if !crt.NotBefore.Equal(testNow) || !crt.NotAfter.Equal(testNow.Add(TalosconfigValidity)) {
		t.Errorf("valid %s to %s", crt.NotBefore, crt.NotAfter)
	}
	verify := func(roots []byte) error {
		_, err := crt.Verify(stdx509.VerifyOptions{
			Roots:       certPool(t, "CA", roots),
			CurrentTime: testNow.Add(time.Hour),
			KeyUsages:   []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth},
		})
		return err
	}
	if err := verify(osCA); err != nil {
		t.Errorf("client certificate does not verify against the OS CA: %v", err)
	}
	if err := verify(k8sCA); err == nil {
		t.Error("client certificate verifies against the Kubernetes CA")
	}
	// The talosconfig authenticates to a server of the cluster's OS CA,
	// as apid is.
	parsed, err := ParseSecrets(b)
	if err != nil {
		t.Fatal(err)
	}
	srv := mtlsServer(t, parsed.Certs.OS)
	live, err := Talosconfig("alpha", []string{srv.Listener.Addr().String()}, b, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	liveCfg, err := clientconfig.FromBytes(live)
	if err != nil {
		t.Fatal(err)
	}
	lc := liveCfg.Contexts["alpha"]
	who, err := mtlsGet(t, srv.URL, decode("ca", lc.CA), decode("crt", lc.Crt), decode("key", lc.Key))
	if err != nil {
		t.Fatalf("TLS with the talosconfig: %v", err)
	}
	if who != "/os:admin" {
		t.Errorf("server saw client %q", who)
	}

	// No endpoints yet is allowed: talosctl then needs --endpoints.
	out, err = Talosconfig("alpha", nil, b, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := clientconfig.FromBytes(out); err != nil || len(cfg.Contexts["alpha"].Endpoints) != 0 {
		t.Errorf("without endpoints: %v", err)
	}
}

func TestTalosconfigErrors(t *testing.T) {
	b := testSecrets(t)
	for _, tc := range []struct {
		name      string
		cluster   string
		endpoints []string
		bundle    []byte
		want      string
	}{
		{"no cluster", "", nil, b, "talosconfig: cluster name: empty"},
		{"empty endpoint", "a", []string{"10.0.0.1", ""}, b, "talosconfig: endpoint 1: empty"},
		{"bad bundle", "a", nil, []byte("certs: {}\n"), "talosconfig: secrets bundle: "},
	} {
		_, err := Talosconfig(tc.cluster, tc.endpoints, tc.bundle, testNow)
		if err == nil || len(err.Error()) < len(tc.want) || err.Error()[:len(tc.want)] != tc.want {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}
