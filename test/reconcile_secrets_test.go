package test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// e2eTenantSecrets reads a tenant's Talos secrets bundle from its TF state
// (the input of terraform_data.talos_secrets) through the state backend,
// and returns the secret values in it: every value of a key, secret, token
// or encryption secret line.
func e2eTenantSecrets(t *testing.T, s *e2eServer, tenant string) []string {
	t.Helper()
	var state struct {
		Resources []struct {
			Type      string `json:"type"`
			Name      string `json:"name"`
			Instances []struct {
				Attributes struct {
					Input struct {
						Value any `json:"value"`
					} `json:"input"`
				} `json:"attributes"`
			} `json:"instances"`
		} `json:"resources"`
	}
	s.mustGet("/tfstate/"+tenant, &state)
	var bundle string
	for _, r := range state.Resources {
		if r.Type == "terraform_data" && r.Name == "talos_secrets" && len(r.Instances) == 1 {
			bundle, _ = r.Instances[0].Attributes.Input.Value.(string)
		}
	}
	if bundle == "" {
		t.Fatalf("state of %s holds no terraform_data.talos_secrets with a string input", tenant)
	}
	var out []string
	for _, line := range strings.Split(bundle, "\n") {
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
		code, body := s.request(http.MethodGet, path, nil, nil)
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
	log := s.log()
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
