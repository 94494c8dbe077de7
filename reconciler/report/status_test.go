package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	long := strings.Repeat("word ", 40) // 200 characters
	tests := []struct {
		in, want string
	}{
		{"applied: +2 ~0 -1", "applied: +2 ~0 -1"},
		{"  two\nlines\r\n\tand  tabs ", "two lines and tabs"},
		{strings.Repeat("x", 140), strings.Repeat("x", 140)},
		{strings.Repeat("x", 141), strings.Repeat("x", 139) + "…"},
		{strings.Repeat("é", 141), strings.Repeat("é", 139) + "…"},
		// A cut near a space ends at the word before it.
		{long, strings.TrimSpace(strings.Repeat("word ", 27)) + "…"},
	}
	for _, tt := range tests {
		got := truncate(tt.in, MaxDescription)
		if got != tt.want {
			t.Errorf("truncate(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if n := utf8.RuneCountInString(got); n > MaxDescription {
			t.Errorf("truncate(%q) has %d characters", tt.in, n)
		}
	}
}

func TestInstanceNames(t *testing.T) {
	for host, want := range map[string]string{
		"Build-01.Example.COM":   "build-01.example.com",
		"rezus cloud/1":          "rezus-cloud-1",
		"":                       "rezuscloud",
		"---":                    "rezuscloud",
		"-a":                     "a",
		strings.Repeat("h", 300): strings.Repeat("h", 100),
	} {
		got := instanceFromHost(host)
		if got != want {
			t.Errorf("instanceFromHost(%q) = %q, want %q", host, got, want)
		}
		if err := CheckInstance(got); err != nil {
			t.Errorf("instanceFromHost(%q) = %q, which CheckInstance refuses: %v", host, got, err)
		}
	}
	if err := CheckInstance(DefaultInstance()); err != nil {
		t.Errorf("DefaultInstance: %v", err)
	}
	for _, bad := range []string{"", "a/b", "a b", "a:b", "-a", strings.Repeat("a", 101), "ü"} {
		if err := CheckInstance(bad); err == nil {
			t.Errorf("CheckInstance(%q) accepted it", bad)
		}
	}
	if got := TenantContext("eu-1", "prod"); got != "rezuscloud/eu-1/prod" {
		t.Errorf("TenantContext = %q", got)
	}
	if got := CommitContext("eu-1"); got != "rezuscloud/eu-1" {
		t.Errorf("CommitContext = %q", got)
	}
}

func TestTokenFrom(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("ghp_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(dir, "envtoken")
	if err := os.WriteFile(envFile, []byte("ghp_fromenvfile\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	twoLines := filepath.Join(dir, "two")
	if err := os.WriteFile(twoLines, []byte("ghp_one\nghp_two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string {
		return func(k string) string { return m[k] }
	}
	tests := []struct {
		name    string
		file    string
		env     map[string]string
		want    Token
		wantErr string // part of the error; "" for none
	}{
		{name: "file option", file: file, env: map[string]string{EnvGitHubToken: "ghp_env"}, want: "ghp_fromfile"},
		{name: "variable", env: map[string]string{EnvGitHubToken: " ghp_env "}, want: "ghp_env"},
		{name: "variable file", env: map[string]string{EnvGitHubToken + "_FILE": envFile}, want: "ghp_fromenvfile"},
		{name: "both", env: map[string]string{EnvGitHubToken: "ghp_env", EnvGitHubToken + "_FILE": envFile},
			wantErr: "REZUSCLOUD_GITHUB_TOKEN and REZUSCLOUD_GITHUB_TOKEN_FILE are both set"},
		{name: "none", env: map[string]string{}, wantErr: "no token: set a token file, REZUSCLOUD_GITHUB_TOKEN or REZUSCLOUD_GITHUB_TOKEN_FILE"},
		{name: "missing file", file: filepath.Join(dir, "nope"), wantErr: "token file: open " + filepath.Join(dir, "nope")},
		{name: "empty file", env: map[string]string{EnvGitHubToken + "_FILE": empty}, wantErr: "REZUSCLOUD_GITHUB_TOKEN_FILE " + empty + " is empty"},
		{name: "two lines", file: twoLines, wantErr: "holds more than one line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TokenFrom(tt.file, EnvGitHubToken, env(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "ghp_") {
					t.Fatalf("the error shows a token: %v", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("TokenFrom = %q, %v; want %q", string(got), err, string(tt.want))
			}
		})
	}
	if _, err := TokenFrom("", EnvGitLabToken, env(nil)); !errors.Is(err, ErrNoToken) {
		t.Fatalf("no token: %v does not wrap ErrNoToken", err)
	}
}

func TestTokenNeverShows(t *testing.T) {
	const secret = "glpat-s3cr3t"
	opts := GitLabOptions{Project: "g/p", Token: secret}
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	log.Info("config", "gitlab", opts, "token", opts.Token)
	log.Info("token alone", slog.Any("t", opts.Token))
	text := slog.New(slog.NewTextHandler(&logs, nil))
	text.Info("config", "token", opts.Token)
	//lint:ignore SA1026 what encoding/json shows of the options is what this checks
	js, err := json.Marshal(opts)
	if err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{
		"%v":  fmt.Sprintf("%v", opts),
		"%+v": fmt.Sprintf("%+v", opts),
		"%#v": fmt.Sprintf("%#v", opts),
		//lint:ignore S1025 what %s shows of the token is what this checks
		"%s":   fmt.Sprintf("%s", opts.Token),
		"slog": logs.String(),
		"json": string(js),
	} {
		if strings.Contains(out, secret) {
			t.Errorf("%s shows the token: %s", what, out)
		}
		if !strings.Contains(out, redacted) {
			t.Errorf("%s does not say the token is redacted: %s", what, out)
		}
	}
	if Token("").String() != "" {
		t.Error("an empty token prints as something")
	}
}

func TestStatusValidate(t *testing.T) {
	sha := strings.Repeat("a", 40)
	good := Status{SHA: sha, Context: "rezuscloud/x/t", State: StateSuccess}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Status{
		{SHA: "abc", Context: "c", State: StateSuccess},
		{SHA: strings.Repeat("A", 40), Context: "c", State: StateSuccess},
		{SHA: sha, Context: "", State: StateSuccess},
		{SHA: sha, Context: "a\nb", State: StateSuccess},
		{SHA: sha, Context: "a: b", State: StateSuccess},
		{SHA: sha, Context: "c", State: "done"},
	} {
		err := bad.validate()
		if err == nil {
			t.Errorf("%+v accepted", bad)
			continue
		}
		if !errors.Is(err, ErrPermanent) {
			t.Errorf("%+v: %v is not permanent", bad, err)
		}
	}
}
