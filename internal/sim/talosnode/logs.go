package talosnode

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
)

// logLine is one synthetic log line of a node.
type logLine struct {
	at   time.Time
	text string
}

// logServices are the services whose logs a node has.
var logServices = map[string]bool{
	"apid": true, "containerd": true, "cri": true, "etcd": true, "kubelet": true,
	"machined": true, "trustd": true, "udevd": true, "kube-apiserver": true,
}

// history returns the lines a service logged so far, in the order they
// happened: its start at each boot the node's state knows of, and for
// machined the write calls of the journal. The lines are plausible, not
// Talos's exact ones.
func (h *Host) history(n *node, svc string) []logLine {
	h.mu.Lock()
	created, up, platform, version := n.st.CreatedAt, n.st.UpSince, n.st.Platform, n.st.Version
	h.mu.Unlock()
	var out []logLine
	add := func(t time.Time, format string, args ...any) {
		if !t.IsZero() {
			out = append(out, logLine{at: t, text: fmt.Sprintf(format, args...)})
		}
	}
	switch svc {
	case "machined":
		add(created, "[talos] Talos %s on platform %s: machine powered on", version, platform)
		entries, _ := ReadJournal(h.opts.Dir, n.st.ID)
		for _, e := range entries {
			msg := strings.ToLower(e.Call) + " request received"
			switch {
			case e.Call == "ApplyConfiguration":
				msg = "apply config request: mode " + e.Mode
				if e.Applied != "" && e.Applied != e.Mode {
					msg += "(" + e.Applied + ")"
				}
			case e.Image != "":
				msg += fmt.Sprintf(": %q", e.Image)
			}
			if e.Error != "" {
				msg += ": " + e.Error
			}
			add(e.Time, "[talos] %s", msg)
		}
		add(up, "[talos] boot sequence: done")
		add(up, "[talos] machine is running and ready")
	case "kubelet":
		add(up, `I%s    1742 server.go:1262] "Started kubelet"`, up.Format("0102 15:04:05.000000"))
	case "etcd":
		add(up, `{"level":"info","ts":"%s","caller":"etcdmain/main.go:44","msg":"starting etcd"}`, up.Format(time.RFC3339Nano))
	default:
		add(up, "%s: service started", svc)
	}
	// A call made after the last boot comes after its lines.
	slices.SortStableFunc(out, func(a, b logLine) int { return a.at.Compare(b.at) })
	return out
}

// heartbeat is the line a followed service logs every LogInterval.
func heartbeat(svc string, t time.Time) string {
	switch svc {
	case "kubelet":
		return fmt.Sprintf(`I%s    1742 kubelet.go:2453] "SyncLoop (housekeeping)"`, t.Format("0102 15:04:05.000000"))
	case "etcd":
		return fmt.Sprintf(`{"level":"debug","ts":"%s","caller":"etcdserver/server.go:2228","msg":"applied entries"}`, t.Format(time.RFC3339Nano))
	case "machined":
		return "[talos] controller runtime: reconciled"
	}
	return svc + ": alive"
}

func stamp(svc string, l logLine) string {
	if svc == "kubelet" || svc == "etcd" {
		return l.text
	}
	return l.at.UTC().Format("2006/01/02 15:04:05.000000") + " " + l.text
}

// Logs streams a service's log: the last TailLines lines (all for a
// negative value), then with Follow new lines as they come, until the
// client goes away or the node goes down.
func (a *machineAPI) Logs(in *machine.LogsRequest, srv machine.MachineService_LogsServer) error {
	h, n := a.h, callOf(srv.Context()).n
	if !logServices[in.Id] {
		return fmt.Errorf("log %q was not registered", in.Id)
	}
	lines := h.history(n, in.Id)
	if in.TailLines >= 0 && int(in.TailLines) < len(lines) {
		lines = lines[len(lines)-int(in.TailLines):]
	}
	if err := sendLines(srv, in.Id, lines); err != nil {
		return err
	}
	if !in.Follow {
		return nil
	}
	sent := time.Time{}
	if len(lines) > 0 {
		sent = lines[len(lines)-1].at
	}
	return a.follow(srv, n, func(changed bool, now time.Time) error {
		var fresh []logLine
		for _, l := range h.history(n, in.Id) {
			if l.at.After(sent) {
				fresh = append(fresh, l)
				sent = l.at
			}
		}
		if len(fresh) == 0 && !changed {
			fresh = []logLine{{at: now, text: heartbeat(in.Id, now)}}
		}
		return sendLines(srv, in.Id, fresh)
	})
}

// follow calls each on every change of n and every LogInterval until the
// stream ends.
func (a *machineAPI) follow(srv grpc.ServerStream, n *node, each func(changed bool, now time.Time) error) error {
	tick := time.NewTicker(a.h.t.LogInterval)
	defer tick.Stop()
	for {
		a.h.mu.Lock()
		wait, gone := n.changed, n.gone.Load()
		a.h.mu.Unlock()
		if gone {
			return nil
		}
		var err error
		select {
		case <-srv.Context().Done():
			return nil
		case <-wait:
			err = each(true, a.h.now())
		case <-tick.C:
			err = each(false, a.h.now())
		}
		if err != nil {
			return err
		}
	}
}

func sendLines(srv grpc.ServerStream, svc string, lines []logLine) error {
	if len(lines) == 0 {
		return nil
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(stamp(svc, l))
		b.WriteByte('\n')
	}
	return srv.SendMsg(&common.Data{Bytes: []byte(b.String())})
}

// Dmesg streams the kernel log of the node's last boot (nothing old with
// Tail), then with Follow a line at every stage change.
func (a *machineAPI) Dmesg(in *machine.DmesgRequest, srv machine.MachineService_DmesgServer) error {
	h, n := a.h, callOf(srv.Context()).n
	h.mu.Lock()
	boot, platform, version := n.st.CreatedAt, n.st.Platform, n.st.Version
	if !n.st.UpSince.IsZero() {
		boot = n.st.UpSince.Add(-h.t.Boot)
	}
	h.mu.Unlock()
	kern := func(t time.Time, msg string) string {
		return fmt.Sprintf("%s: %7s: [%s]: %s\n", "kern", "info", t.UTC().Format(time.RFC3339Nano), msg)
	}
	if !in.Tail {
		var b strings.Builder
		for i, msg := range []string{
			"Linux version 6.12.18-talos (@buildkitsandbox) (gcc (GCC) 14.2.0, GNU ld (GNU Binutils) 2.44) #1 SMP",
			"Command line: talos.platform=" + platform + " console=ttyS0 init_on_alloc=1 slab_nomerge pti=on",
			"BIOS-provided physical RAM map:",
			"Memory: 4012345K/4193784K available",
			"[talos] Talos " + version + " starting",
		} {
			b.WriteString(kern(boot.Add(time.Duration(i)*time.Millisecond), msg))
		}
		if err := srv.Send(&common.Data{Bytes: []byte(b.String())}); err != nil {
			return err
		}
	}
	if !in.Follow {
		return nil
	}
	return a.follow(srv, n, func(changed bool, now time.Time) error {
		if !changed {
			return nil
		}
		h.mu.Lock()
		stage := n.viewAt(now).Stage
		h.mu.Unlock()
		return srv.Send(&common.Data{Bytes: []byte(kern(now, "[talos] machine stage: "+stage.String()))})
	})
}
