package deploy

import (
	"slices"
	"strings"
	"testing"
)

// TestChartIdentity: the users file and the OIDC client secret are
// Secrets mounted as files and passed by path; the OIDC settings that are
// not secret are flags; none of them is in the environment.
func TestChartIdentity(t *testing.T) {
	vals := map[string]any{
		"secrets": map[string]any{"users": "rezus-users", "oidcClientSecret": "rezus-oidc"},
		"oidc": map[string]any{
			"issuer":      "https://dex.example.com",
			"clientID":    "rezuscloud",
			"cliClientID": "rezusctl",
			"roleMap":     "platform-admins=admin,platform=edit,*=view",
			"scopes":      []any{"openid", "email", "groups"},
		},
	}
	r := render(t, vals)
	pod := r.deploy.Spec.Template.Spec
	c := server(t, pod)
	checkSecretFile(t, pod, c, "users", "rezus-users", "/etc/rezuscloud/users")
	if items := volume(t, pod, "users").Secret.Items; len(items) != 1 || items[0].Key != "users" || items[0].Path != "users" {
		t.Errorf("users volume items %+v, want the key users as the file users", items)
	}
	checkSecretFile(t, pod, c, "oidc", "rezus-oidc", "/etc/rezuscloud/oidc")
	if items := volume(t, pod, "oidc").Secret.Items; len(items) != 1 || items[0].Key != "client-secret" || items[0].Path != "client-secret" {
		t.Errorf("oidc volume items %+v, want the key client-secret as the file client-secret", items)
	}
	want := []string{
		"--users-file=/etc/rezuscloud/users/users",
		"--oidc-issuer=https://dex.example.com",
		"--oidc-client-id=rezuscloud",
		"--oidc-client-secret-file=/etc/rezuscloud/oidc/client-secret",
		"--oidc-cli-client-id=rezusctl",
		"--oidc-role-map=platform-admins=admin,platform=edit,*=view",
		"--oidc-scopes=openid,email,groups",
	}
	var got []string
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--users-") || strings.HasPrefix(a, "--oidc-") {
			got = append(got, a)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("identity args:\n%q\nwant\n%q", got, want)
	}
	checkServeFlags(t, "chart args", c.Args)
	checkEnv(t, "chart env", envOf(c))
	for _, e := range c.Env {
		if strings.Contains(e.Value, "dex.example.com") || strings.Contains(strings.ToLower(e.Name), "oidc") || strings.Contains(strings.ToLower(e.Name), "users") {
			t.Errorf("env %s=%s: identity settings are flags, secrets files", e.Name, e.Value)
		}
	}

	// Without them the chart passes none of these flags and mounts nothing.
	d := render(t, nil)
	c = server(t, d.deploy.Spec.Template.Spec)
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--users-") || strings.HasPrefix(a, "--oidc-") {
			t.Errorf("%s without users or oidc values", a)
		}
	}
	for _, v := range d.deploy.Spec.Template.Spec.Volumes {
		if v.Name == "users" || v.Name == "oidc" {
			t.Errorf("a %s volume without its secret", v.Name)
		}
	}

	// An issuer alone (a public client) passes no secret file.
	r = render(t, map[string]any{"oidc": map[string]any{"issuer": "https://dex.example.com", "clientID": "rezuscloud"}})
	c = server(t, r.deploy.Spec.Template.Spec)
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--oidc-client-secret-file") }) {
		t.Errorf("args %q pass a client secret without secrets.oidcClientSecret", c.Args)
	}
}

func TestChartIdentityRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"issuer without client", map[string]any{"oidc": map[string]any{"issuer": "https://dex.example.com"}}, "oidc.issuer needs oidc.clientID"},
		{"client secret without issuer", map[string]any{"secrets": map[string]any{"oidcClientSecret": "s"}}, "need oidc.issuer"},
		{"role map without issuer", map[string]any{"oidc": map[string]any{"roleMap": "*=view"}}, "need oidc.issuer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := renderFiles(tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
