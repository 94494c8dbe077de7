package main

import (
	"bytes"
	"context"
	"io"
	"testing"
)

// TestExternalURL: --external-url, its deprecated name --public-url and
// their environment variables give the base of the dashboard's links;
// --external-url wins, and without either the server's own URL is used.
func TestExternalURL(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"default", nil, nil, "http://127.0.0.1:8080"},
		{"flag", nil, []string{"--external-url", "https://rezus.example/"}, "https://rezus.example"},
		{"deprecated flag", nil, []string{"--public-url", "https://old.example"}, "https://old.example"},
		{"both", nil, []string{"--public-url", "https://old.example", "--external-url", "https://rezus.example"}, "https://rezus.example"},
		{"env", map[string]string{"REZUSCLOUD_EXTERNAL_URL": "https://env.example"}, nil, "https://env.example"},
		{"flag beats deprecated env", map[string]string{"REZUSCLOUD_PUBLIC_URL": "https://old.example"}, []string{"--external-url", "https://rezus.example"}, "https://rezus.example"},
	} {
		var got string
		cmd := newServeCmd(func(k string) string { return c.env[k] }, func(_ context.Context, f *serveFlags, _ io.Writer) error {
			got = f.dashboardURL("http://127.0.0.1:8080")
			return nil
		})
		cmd.SetArgs(c.args)
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: dashboard URL %q, want %q", c.name, got, c.want)
		}
	}
	if got := commitPage("https://rezus.example", "sha256-ab/c"); got != "https://rezus.example/commits/sha256-ab%2Fc" {
		t.Errorf("commit page %q", got)
	}
}
