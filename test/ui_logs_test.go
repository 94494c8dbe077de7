package test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/ui"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestUIBrowserLogTail: once the server serves a machine's log
// (GET /api/v1/tenants/{t}/machines/{id}/logs, Server-Sent Events with
// sse=true, one line per event), the machine page shows it and follows
// it. The server here is the real backend and dashboard in this process,
// with a log endpoint that streams numbered lines.
func TestUIBrowserLogTail(t *testing.T) {
	chromiumPath(t)
	srv, err := backend.NewServer(backend.Config{DataDir: filepath.Join(t.TempDir(), "data"), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ui.Serve(srv, ui.Options{}); err != nil {
		t.Fatal(err)
	}
	asked := make(chan string, 1)
	srv.Handle("GET /api/v1/tenants/{name}/machines/{id}/logs", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- r.URL.RawQuery:
		default:
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 1; r.Context().Err() == nil; i++ {
			fmt.Fprintf(w, "data: machined: line %d <b>not markup</b>\n\n", i)
			if rc.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}))
	err = srv.Store().Update(func(tx *backend.Tx) error {
		m := &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine,
			Metadata: schema.ObjectMeta{Name: "m-1", Labels: map[string]string{schema.LabelTenant: "t"}},
			Spec:     schema.MachineSpec{Hostname: "m-1", Tenant: "t", NodeGroup: "workers", Role: schema.RoleWorker, ManagementAddress: "127.0.0.9"}}
		_, err := tx.PutObject(schema.KindMachine, "m-1", m)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	b := newBrowser(t, srv.URL())
	b.open("/tenants/t/machines/m-1")
	if !b.waitFor(`!document.querySelector("section.logs").hidden && document.querySelector("pre.log").textContent.includes("line 3")`, 10*time.Second) {
		t.Fatalf("the log section shows %q", eval[string](b, `document.querySelector("section.logs").outerHTML`))
	}
	select {
	case q := <-asked:
		if !strings.Contains(q, "follow=true") || !strings.Contains(q, "sse=true") || !strings.Contains(q, "tailLines=100") {
			t.Errorf("the page asked for the log with %q, want follow=true, sse=true and tailLines=100", q)
		}
	default:
		t.Error("the log endpoint was never asked")
	}
	if n := eval[int](b, `document.querySelectorAll("pre.log b").length`); n != 0 {
		t.Error("log lines are shown as markup")
	}
	b.screenshot("machine-log")
	b.checkRequests()
	b.checkConsole()
}

// TestUIBrowserLogTailFromANode: the machine page of a simulated Talos
// node, through the real server binary, shows the node's own log (its
// boot) and follows it: the heartbeat lines the node logs while followed
// arrive without a reload.
func TestUIBrowserLogTailFromANode(t *testing.T) {
	chromiumPath(t)
	e := newE2E(t, e2eOptions{args: planeArgs("--sim-timings", planeTimings+",log=200ms")})
	planeWaitReady(t, e, "production")
	m := e.srv.tenantMachines("production")[0]
	b := newBrowser(t, e.srv.url)
	b.open("/tenants/production/machines/" + m.Metadata.Name)
	if !b.waitFor(`document.querySelector("pre.log") && document.querySelector("pre.log").textContent.includes("on platform rezussim: machine powered on")`, 20*time.Second) {
		t.Fatalf("the log section shows %q", eval[string](b, `(document.querySelector("section.logs")||{outerHTML:"none"}).outerHTML`))
	}
	const beats = `document.querySelector("pre.log").textContent.split("controller runtime: reconciled").length - 1`
	first := eval[int](b, beats)
	if !b.waitFor(beats+` >= `+fmt.Sprint(first+3), 20*time.Second) {
		t.Fatalf("the followed log got %d heartbeats, want at least %d", eval[int](b, beats), first+3)
	}
	b.screenshot("machine-log-node")
	b.checkRequests()
	b.checkConsole()
}
