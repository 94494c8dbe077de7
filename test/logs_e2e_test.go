package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/schema"
)

// logsRig is a real server with a tokens file (view, edit and admin) that
// reconciles the examples on the simulated cloud, whose machines are
// simulated Talos nodes.
type logsRig struct {
	*e2e
	tokens map[string]string // role -> token
	cp     schema.Machine    // a control plane of production
}

func newLogsRig(t *testing.T) *logsRig {
	t.Helper()
	tokensFile, byName := servertest.Tokens(t, map[string]string{"logs-view": "view", "logs-edit": "edit", "logs-admin": "admin"})
	tokens := map[string]string{}
	for name, tok := range byName {
		tokens[strings.TrimPrefix(name, "logs-")] = tok
	}
	r := &logsRig{e2e: newE2E(t, e2eOptions{args: []string{"--tokens-file", tokensFile}, noWait: true}), tokens: tokens}
	r.srv.WaitFor("the first commit to be applied", func() bool {
		var st e2eStatus
		code, b := r.call("admin", "/api/v1/status", nil)
		return code == http.StatusOK && json.Unmarshal(b, &st) == nil && st.Reconciler.LastAppliedCommit == r.first
	})
	var list struct {
		Items []schema.Machine `json:"items"`
	}
	if code, b := r.call("admin", "/api/v1/tenants/production/machines", nil); code != http.StatusOK || json.Unmarshal(b, &list) != nil {
		t.Fatalf("machines of production: %d %s", code, b)
	}
	// Every run reads the same machine: the first control plane by its
	// address in the TF state, the one the Talos plane bootstrapped (the
	// API lists machines by their provider IDs, which are random).
	for _, m := range list.Items {
		if m.Spec.Role == schema.RoleControlPlane && (r.cp.Metadata.Name == "" || m.Spec.TFAddress < r.cp.Spec.TFAddress) {
			r.cp = m
		}
	}
	if r.cp.Metadata.Name == "" {
		t.Fatal("production has no control plane")
	}
	// The node may still be coming up: wait until its log says it runs.
	// That line need not be the last: the calls the machine took since it
	// came up (the bootstrap) are logged after it.
	r.srv.WaitFor("the control plane to run", func() bool {
		code, b := r.call("admin", r.logsPath("logs"), nil)
		return code == http.StatusOK && bytes.Contains(b, []byte("machine is running and ready"))
	})
	return r
}

func (r *logsRig) logsPath(what string) string {
	return "/api/v1/tenants/production/machines/" + r.cp.Metadata.Name + "/" + what
}

// open sends a GET of path as role ("" for no token) and returns the
// answer with its body unread.
func (r *logsRig) open(ctx context.Context, role, method, path string, h http.Header) *http.Response {
	r.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, r.srv.URL()+path, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if role != "" {
		req.Header.Set("Authorization", "Bearer "+r.tokens[role])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// call GETs path as role and returns the status and the whole body.
func (r *logsRig) call(role, path string, h http.Header) (int, []byte) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	defer cancel()
	resp := r.open(ctx, role, http.MethodGet, path, h)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, b
}

// audit returns the audit log's lines about machine logs.
func (r *logsRig) audit() []map[string]any {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.data, "audit.log"))
	if err != nil {
		r.t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range bytes.Split(b, []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && strings.HasPrefix(m["msg"].(string), "machine logs") {
			out = append(out, m)
		}
	}
	return out
}

func nonEmptyLines(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestLogsEndToEnd reads machines' logs through the real server from the
// simulated Talos nodes: a service's log and its tail, a follow that gets
// new lines, SSE, dmesg; the view role is refused and every access is in
// the audit log; a machine that refuses connections answers 502 at once;
// and a follow ends when the server shuts down.
func TestLogsEndToEnd(t *testing.T) {
	r := newLogsRig(t)

	var full []string
	t.Run("a service's log", func(t *testing.T) {
		code, b := r.call("edit", r.logsPath("logs"), nil)
		if code != http.StatusOK {
			t.Fatalf("logs as edit: %d %s", code, b)
		}
		full = nonEmptyLines(b)
		if len(full) < 2 || !strings.Contains(string(b), "[talos] Talos v1.12.6 on platform rezussim: machine powered on") {
			t.Fatalf("machined's log has %d lines, want its boot:\n%s", len(full), b)
		}
	})

	t.Run("tail", func(t *testing.T) {
		code, b := r.call("admin", r.logsPath("logs")+"?tailLines=1", nil)
		got := nonEmptyLines(b)
		if code != http.StatusOK || len(got) != 1 || len(full) == 0 || got[0] != full[len(full)-1] {
			t.Fatalf("tailLines=1: %d, %d lines %q; want the last line of %q", code, len(got), got, full)
		}
		for _, bad := range []string{"-1", "10001", "many"} {
			if code, b := r.call("admin", r.logsPath("logs")+"?tailLines="+bad, nil); code != http.StatusBadRequest || !bytes.Contains(b, []byte("tailLines")) {
				t.Errorf("tailLines=%s: %d %s, want 400 naming tailLines", bad, code, b)
			}
		}
	})

	t.Run("follow gets new lines", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
		defer cancel()
		resp := r.open(ctx, "edit", http.MethodGet, r.logsPath("logs")+"?service=kubelet&follow=true&tailLines=1", nil)
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Fatalf("follow: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		// The last line so far, then new ones as the kubelet logs them.
		sc := bufio.NewScanner(resp.Body)
		for n, want := range []string{`"Started kubelet"`, `"SyncLoop (housekeeping)"`, `"SyncLoop (housekeeping)"`} {
			if !sc.Scan() {
				t.Fatalf("the follow ended after %d lines: %v", n, sc.Err())
			}
			if !strings.Contains(sc.Text(), want) {
				t.Fatalf("line %d of a followed kubelet log: %q, want %s", n, sc.Text(), want)
			}
		}
	})

	t.Run("sse", func(t *testing.T) {
		code, b := r.call("edit", r.logsPath("logs")+"?sse=true&tailLines=2", nil)
		events := strings.Split(strings.TrimSpace(string(b)), "\n\n")
		if code != http.StatusOK || len(events) != 3 || !strings.HasPrefix(events[0], "data: ") || events[2] != "event: end\ndata:" {
			t.Fatalf("sse: %d, %d events %q; want 2 lines and the end", code, len(events), events)
		}
		if strings.TrimPrefix(events[1], "data: ") != full[len(full)-1] {
			t.Errorf("sse's last line %q, want %q", events[1], full[len(full)-1])
		}
	})

	t.Run("dmesg", func(t *testing.T) {
		code, b := r.call("edit", r.logsPath("dmesg"), nil)
		if code != http.StatusOK || !bytes.Contains(b, []byte("Linux version")) || !bytes.Contains(b, []byte("talos.platform=rezussim")) {
			t.Fatalf("dmesg: %d %s", code, b)
		}
		code, b = r.call("edit", r.logsPath("dmesg")+"?tailLines=1", nil)
		if lines := nonEmptyLines(b); code != http.StatusOK || len(lines) != 1 || !strings.Contains(lines[0], "[talos] Talos v1.12.6 starting") {
			t.Fatalf("dmesg tailLines=1: %d %q", code, lines)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		if code, b := r.call("view", r.logsPath("logs"), nil); code != http.StatusForbidden || !bytes.Contains(b, []byte("needs edit")) {
			t.Errorf("logs as view: %d %s, want 403", code, b)
		}
		if code, _ := r.call("view", r.logsPath("dmesg"), nil); code != http.StatusForbidden {
			t.Errorf("dmesg as view: %d, want 403", code)
		}
		if code, _ := r.call("", r.logsPath("logs"), nil); code != http.StatusUnauthorized {
			t.Errorf("logs without a token: %d, want 401", code)
		}
		if code, b := r.call("admin", "/api/v1/tenants/staging/machines/"+r.cp.Metadata.Name+"/logs", nil); code != http.StatusNotFound {
			t.Errorf("logs of production's machine under staging: %d %s, want 404", code, b)
		}
		if code, b := r.call("admin", r.logsPath("logs")+"?service=nope", nil); code != http.StatusBadRequest || !bytes.Contains(b, []byte(`nope`)) || !bytes.Contains(b, []byte("not registered")) {
			t.Errorf("an unknown service: %d %s, want 400 naming it", code, b)
		}
		for _, m := range []string{http.MethodPost, http.MethodDelete, http.MethodPut} {
			resp := r.open(context.Background(), "admin", m, r.logsPath("logs"), nil)
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s logs: %d, Allow %q; want 405 and GET, HEAD", m, resp.StatusCode, resp.Header.Get("Allow"))
			}
		}
	})

	t.Run("audit", func(t *testing.T) {
		var granted, refused, ended, unauthenticated int
		for _, a := range r.audit() {
			switch {
			case a["msg"] == "machine logs" && a["who"] == "logs-edit" && a["role"] == "edit" && a["tenant"] == "production" && a["machine"] == r.cp.Metadata.Name && a["at"] != nil:
				granted++
			case a["msg"] == "machine logs refused" && a["who"] == "logs-view" && a["reason"] == "role":
				refused++
			case a["msg"] == "machine logs refused" && a["who"] == "(unauthenticated)":
				unauthenticated++
			case a["msg"] == "machine logs ended" && a["who"] == "logs-edit" && a["bytes"].(float64) > 0:
				ended++
			}
		}
		// edit read: the log, the follow, sse, dmesg twice.
		if granted != 5 || refused != 2 || unauthenticated != 1 || ended < 4 {
			t.Errorf("audit log: %d granted, %d refused, %d unauthenticated, %d ended; want 5, 2, 1 and at least 4:\n%v", granted, refused, unauthenticated, ended, r.audit())
		}
	})

	t.Run("a machine that refuses connections", func(t *testing.T) {
		sim := r.data + "-sim"
		if err := talosnode.WriteFaults(sim, talosnode.Faults{r.cp.Metadata.Name: {Refuse: true}}); err != nil {
			t.Fatal(err)
		}
		defer talosnode.WriteFaults(sim, talosnode.Faults{})
		var code int
		var b []byte
		r.srv.WaitFor("the node to refuse connections", func() bool {
			code, b = r.call("admin", r.logsPath("logs"), nil)
			return code != http.StatusOK
		})
		var ae rolesAPIError
		if code != http.StatusBadGateway || json.Unmarshal(b, &ae) != nil || !strings.Contains(ae.Message, "does not answer") || !strings.Contains(ae.Message, r.cp.Spec.ManagementAddress) {
			t.Fatalf("logs of a machine that refuses connections: %d %s; want 502 naming the machine's address", code, b)
		}
	})

	t.Run("a follow ends when the server shuts down", func(t *testing.T) {
		talosnode.WriteFaults(r.data+"-sim", talosnode.Faults{})
		var resp *http.Response
		r.srv.WaitFor("a follow", func() bool {
			resp = r.open(context.Background(), "admin", http.MethodGet, r.logsPath("logs")+"?follow=true&tailLines=0", nil)
			if resp.StatusCode != http.StatusOK {
				resp.Body.Close()
				return false
			}
			return true
		})
		defer resp.Body.Close()
		ended := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, resp.Body)
			ended <- err
		}()
		// stop fails unless the server exits 0, which it does only when
		// every request ended within its shutdown timeout.
		r.srv.Stop()
		select {
		case err := <-ended:
			if err != nil {
				t.Errorf("the follow ended with %v, want its end", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the follow is still open after the server stopped")
		}
	})
}
