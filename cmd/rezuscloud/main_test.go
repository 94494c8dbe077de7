package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
)

// parseServe parses args for `serve` with env as the environment and
// returns the resulting backend.Config, without serving.
func parseServe(t *testing.T, env map[string]string, args ...string) (backend.Config, error) {
	t.Helper()
	var got backend.Config
	cmd := newServeCmd(func(k string) string { return env[k] }, func(_ context.Context, f *serveFlags, _ io.Writer) error {
		var err error
		got, err = serverConfig(f, nil)
		return err
	})
	cmd.SetArgs(args)
	cmd.SetOut(new(bytes.Buffer))
	cmd.SetErr(new(bytes.Buffer))
	err := cmd.Execute()
	return got, err
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rezuscloud.yaml")
	os.WriteFile(file, []byte(`
data: /from/file
listen: 127.0.0.1:7001
tokens-file: /file/tokens
state-history: 7
stale-lock-age: 5m
state-max-bytes: 1048576
body-timeout: 30s
`), 0o600)
	env := map[string]string{
		"REZUSCLOUD_CONFIG":       file,
		"REZUSCLOUD_LISTEN":       "127.0.0.1:7002",
		"REZUSCLOUD_TOKENS_FILE":  "/env/tokens",
		"REZUSCLOUD_IDLE_TIMEOUT": "45s",
	}
	got, err := parseServe(t, env, "--tokens-file", "/flag/tokens", "--body-memory", "134217728")
	if err != nil {
		t.Fatal(err)
	}
	want := backend.Config{
		DataDir:         "/from/file",     // file
		Listen:          "127.0.0.1:7002", // env beats file
		TokensFile:      "/flag/tokens",   // flag beats env and file
		MaxStateBytes:   1 << 20,
		StateHistory:    7,
		StaleLockAge:    5 * time.Minute,
		ShutdownTimeout: 30 * time.Second, // default
		BodyTimeout:     30 * time.Second,
		IdleTimeout:     45 * time.Second,
		BodyMemory:      128 << 20,
		Version:         "dev",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("config (-want +got):\n%s", diff)
	}

	got, err = parseServe(t, nil, "--state-history", "0", "--stale-lock-age", "0")
	if err != nil {
		t.Fatal(err)
	}
	if got.DataDir != "data" || got.Listen != "127.0.0.1:8080" || got.StateHistory != -1 || got.StaleLockAge != -1 || got.MaxStateBytes != 64<<20 {
		t.Fatalf("defaults = %+v", got)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		file string
		env  map[string]string
		args []string
		want string
	}{
		{file: "datadir: /x\n", want: "unknown setting datadir"},
		{file: "data: [a, b]\n", want: "data: want a string"},
		{file: "state-history: many\n", want: "state-history"},
		{file: "data: /a\ndata: /b\n", want: "data"},
		{env: map[string]string{"REZUSCLOUD_STATE_HISTORY": "x"}, want: "REZUSCLOUD_STATE_HISTORY"},
		{args: []string{"--state-history", "-1"}, want: "want 0 or more"},
		{args: []string{"--config", filepath.Join(dir, "missing.yaml")}, want: "config file"},
	} {
		args := c.args
		if c.file != "" {
			path := filepath.Join(dir, "c.yaml")
			os.WriteFile(path, []byte(c.file), 0o600)
			args = append(args, "--config", path)
		}
		_, err := parseServe(t, c.env, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("file %q env %v args %v: %v, want an error mentioning %q", c.file, c.env, c.args, err, c.want)
		}
	}
}

func TestServeHelpDocumentsEverySetting(t *testing.T) {
	root := newRootCmd(func(string) string { return "" })
	out := new(bytes.Buffer)
	root.SetOut(out)
	root.SetArgs([]string{"serve", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"config", "data", "listen", "tokens-file", "state-max-bytes", "state-history", "stale-lock-age", "shutdown-timeout", "log-level", "log-format"} {
		if !strings.Contains(out.String(), "--"+flag) || !strings.Contains(out.String(), envName(flag)) {
			t.Errorf("serve --help does not document --%s and %s", flag, envName(flag))
		}
	}
}

func TestTokenCreate(t *testing.T) {
	root := newRootCmd(func(string) string { return "" })
	out := new(bytes.Buffer)
	root.SetOut(out)
	root.SetArgs([]string{"token", "create", "ci", "--role", "edit"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "rzc_") || !strings.HasPrefix(lines[1], "ci edit ") {
		t.Fatalf("token create printed:\n%s", out)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(path, []byte(lines[1]+"\n"), 0o600)
	toks, err := backend.LoadTokens(path)
	if err != nil || toks.Len() != 1 {
		t.Fatalf("the printed line does not load: %v", err)
	}

	root.SetArgs([]string{"token", "create", "ci", "--role", "root"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "unknown role") {
		t.Fatalf("--role root: %v", err)
	}
}

// TestMainOpenRunClose boots the server value that serve and demo run on
// 127.0.0.1:0 in a temporary dir, serves a request, and stops it when its
// context ends, saying so in its log; a Main whose Open fails releases
// what it opened.
func TestMainOpenRunClose(t *testing.T) {
	f := testServeFlags(t, servertest.Options{})
	var logged bytes.Buffer // written by Run, read once it has returned
	m := NewMain(f, slog.New(slog.NewTextHandler(&logged, nil)))
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- m.Run(ctx) }()
	resp, err := http.Get(m.Server.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}
	cancel()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after its context ended")
	}
	for _, want := range []string{`msg=stopping…`, `msg="stopped; start the server again on the same data dir to resume where it left off"`} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("the log of a stop has no %s:\n%s", want, logged.String())
		}
	}
	m.Close() // again: a no-op

	// A Main whose Open fails late (here: no tofu binary, after the store
	// is open and the address bound) lets go of what it opened: the data
	// dir opens again.
	g := *f
	g.dir, g.tofu = t.TempDir(), filepath.Join(t.TempDir(), "no-tofu")
	bad := NewMain(&g, slog.New(slog.DiscardHandler))
	if err := bad.Open(); err == nil || !strings.Contains(err.Error(), "--tofu") {
		bad.Close()
		t.Fatalf("Open without a tofu binary: %v", err)
	}
	again := NewMain(f, slog.New(slog.DiscardHandler))
	if err := again.Open(); err != nil {
		t.Fatalf("reopen after a failed Open: %v", err)
	}
	again.Close()
}

// testServeFlags returns serve's settings for the server o describes, as
// the binary gets them from servertest, with the API on 127.0.0.1:0.
func testServeFlags(t *testing.T, o servertest.Options) *serveFlags {
	t.Helper()
	return serveSettings(t, nil, append(o.Flags(t), "--listen", "127.0.0.1:0")...)
}

// TestMain makes this test binary the tofu guard when a replica that a
// test runs in this process starts one (see newGuardCmd), as the
// server's binary is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == tofu.GuardCommand {
		os.Exit(tofu.Guard(os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}
