package talos

import (
	"bytes"
	"testing"
)

// One throwaway bundle serves every patch release of a minor version: the
// version contract is all a bundle depends on.
func TestValidationSecretsOnePerContract(t *testing.T) {
	PrepareValidationSecrets()
	a, err := ValidationSecrets("1.12.6")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ValidationSecrets("v1.12.0")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("1.12.6 and 1.12.0 got different bundles")
	}
	bundle, err := ParseSecrets(a)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := bundle.Certs.OS.GetCert()
	if err != nil {
		t.Fatal(err)
	}
	if ca.NotBefore.Year() > 1970 {
		t.Errorf("OS CA not before %v; want the Unix epoch", ca.NotBefore)
	}
	for _, bad := range []string{"", "one.two", "1.99.0"} {
		if _, err := ValidationSecrets(bad); err == nil {
			t.Errorf("ValidationSecrets(%q) made a bundle", bad)
		}
	}
}
