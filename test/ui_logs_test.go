package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/ui"
	"github.com/rezuscloud/rezuscloud/internal/machinelog"
	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// TestUIBrowserLogTail: the machine page of an edit session shows the
// machine's log and follows it, through the server's own log endpoint
// (GET /api/v1/tenants/{t}/machines/{id}/logs, Server-Sent Events with
// sse=true, one line per event), which the session's cookie reaches as
// it reaches the rest of the API. The server here is the real backend and
// dashboard in this process, with a tokens file, and machine logs that
// stream numbered lines.
func TestUIBrowserLogTail(t *testing.T) {
	chromiumPath(t)
	editor, line, err := backend.NewToken("editor", backend.RoleEdit)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &numberedLogs{asked: make(chan machinelog.Request, 1)}
	srv := servertest.StartBackend(t, backend.Config{TokensFile: tokens}, func(srv *backend.Server) error {
		if err := ui.Serve(srv, ui.Options{}); err != nil {
			return err
		}
		srv.ServeMachineLogs(logs, nil)
		return srv.Store().Update(func(tx store.Tx) error {
			m := &schema.Machine{APIVersion: schema.APIVersion, Kind: schema.KindMachine,
				Metadata: schema.ObjectMeta{Name: "m-1", Labels: map[string]string{schema.LabelTenant: "t"}},
				Spec:     schema.MachineSpec{Hostname: "m-1", Tenant: "t", NodeGroup: "workers", Role: schema.RoleWorker, ManagementAddress: "127.0.0.9"}}
			_, err := tx.PutObject(schema.KindMachine, "m-1", m)
			return err
		})
	})

	b := newBrowser(t, srv.URL())
	b.open("/tenants/t/machines/m-1")
	b.do("log in", chromedp.SendKeys(chromedp.ID("token"), editor), chromedp.Submit(chromedp.ID("token")))
	if !b.waitFor(`location.pathname === "/tenants/t/machines/m-1" && !!document.querySelector("section.logs")`, 10*time.Second) {
		t.Fatalf("after login the browser is at %s", eval[string](b, "location.href"))
	}
	if !b.waitFor(`!document.querySelector("pre.log").hidden && document.querySelector("pre.log").textContent.includes("line 3")`, 10*time.Second) {
		t.Fatalf("the log section shows %q", eval[string](b, `document.querySelector("section.logs").outerHTML`))
	}
	select {
	case req := <-logs.asked:
		if !req.Follow || req.TailLines != 100 || req.Service != "machined" {
			t.Errorf("the page asked for the log with %+v, want machined, follow and 100 lines", req)
		}
	default:
		t.Error("the machine's log was never asked for")
	}
	if n := eval[int](b, `document.querySelectorAll("pre.log b").length`); n != 0 {
		t.Error("log lines are shown as markup")
	}
	b.screenshot("machine-log")
	b.checkRequests()
	b.checkConsole()
}

// numberedLogs serves every machine's log as numbered lines, one every
// 100 ms, until the request ends.
type numberedLogs struct {
	asked chan machinelog.Request
}

func (l *numberedLogs) OpenLogs(ctx context.Context, tenant, machine string, req machinelog.Request) (machinelog.Stream, error) {
	select {
	case l.asked <- req:
	default:
	}
	return &numberedStream{ctx: ctx}, nil
}

type numberedStream struct {
	ctx context.Context
	n   int
}

func (s *numberedStream) Next() ([]byte, error) {
	if s.n > 0 {
		select {
		case <-s.ctx.Done():
			return nil, s.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	s.n++
	return fmt.Appendf(nil, "machined: line %d <b>not markup</b>\n", s.n), nil
}

func (s *numberedStream) Close() error { return nil }

// TestUIBrowserLogTailFromANode: the machine page of a simulated Talos
// node, through the real server binary, shows the node's own log (its
// boot) and follows it: the heartbeat lines the node logs while followed
// arrive without a reload.
func TestUIBrowserLogTailFromANode(t *testing.T) {
	chromiumPath(t)
	e := newE2E(t, e2eOptions{args: planeArgs("--sim-timings", planeTimings+",log=200ms")})
	planeWaitReady(t, e, "production")
	m := e.srv.tenantMachines("production")[0]
	b := newBrowser(t, e.srv.URL())
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
