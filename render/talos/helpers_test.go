package talos

import (
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// testNow is the fixed clock of the tests; whole seconds, as certificates
// keep them.
var testNow = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

var (
	bundleOnce  sync.Once
	bundleBytes []byte
	bundleErr   error
)

// testSecrets returns one bundle shared by the tests that need any bundle:
// generating one takes most of a second (an RSA service-account key).
func testSecrets(t testing.TB) []byte {
	t.Helper()
	bundleOnce.Do(func() {
		bundleBytes, bundleErr = GenerateSecrets("1.12.6", testNow, "")
	})
	if bundleErr != nil {
		t.Fatalf("GenerateSecrets: %v", bundleErr)
	}
	return bundleBytes
}

// baseInput is a valid input for role with the shared bundle.
func baseInput(t testing.TB, role string) ConfigInput {
	return ConfigInput{
		ClusterName:          "alpha",
		ControlPlaneEndpoint: "https://10.0.0.10:6443",
		KubernetesVersion:    "1.34.1",
		TalosVersion:         "1.12.6",
		PodNetwork:           []string{"10.200.0.0/16"},
		ServiceNetwork:       []string{"10.100.0.0/16"},
		Role:                 role,
		Secrets:              testSecrets(t),
		Now:                  testNow,
	}
}

func parsePEMCert(t testing.TB, what string, b []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate in %q", what, b)
	}
	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return crt
}

func certPool(t testing.TB, what string, pemCert []byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCert) {
		t.Fatalf("%s: not a PEM certificate", what)
	}
	return pool
}

// prefixes returns the CIDRs as text.
func prefixes(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
