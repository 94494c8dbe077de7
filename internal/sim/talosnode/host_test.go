package talosnode

import (
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/internal/sim"
)

func wantCode(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(err.Error(), msg) {
		t.Fatalf("%s: err = %v (code %s), want %s containing %q", what, err, status.Code(err), code, msg)
	}
}

func TestMaintenanceModeThenApplyInstallsMetal(t *testing.T) {
	h := openHost(t, "")
	a := addr(h, 10)
	if err := h.StartMaintenance(a); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	// A client may pin the maintenance certificate.
	fp, err := h.MaintenanceFingerprint(a)
	if err != nil {
		t.Fatal(err)
	}
	pinned, _ := x509.ParseFingerprint(fp)
	pc := newClient(t, client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true, VerifyConnection: x509.MatchSPKIFingerprints(pinned)}), client.WithEndpoints(a))
	if _, err := machineStatus(ctx, pc); err != nil {
		t.Fatalf("pinned maintenance client: %v", err)
	}
	other, _ := x509.ParseFingerprint(strings.Repeat("ab", 32))
	wrong := newClient(t, client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true, VerifyConnection: x509.MatchSPKIFingerprints(other)}), client.WithEndpoints(a))
	if _, err := machineStatus(ctx, wrong); err == nil {
		t.Fatal("a client pinning another fingerprint was answered")
	}
	ic := insecureClient(t, a)
	// The maintenance server answers only ApplyConfiguration (and COSI reads).
	_, err = ic.Version(ctx)
	wantCode(t, "Version in maintenance", err, codes.Unimplemented, "API is not implemented in maintenance mode")
	_, err = ic.ServiceList(ctx)
	wantCode(t, "ServiceList in maintenance", err, codes.Unimplemented, "method ServiceList not implemented")
	eventually(t, "maintenance stage", func() bool {
		ms, err := machineStatus(ctx, ic)
		return err == nil && ms.Stage == runtime.MachineStageMaintenance
	})

	secrets := bundle(t, "a")
	// A cloud config lacks the install disk that a metal machine needs.
	_, err = ic.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: machineConfig(t, secrets, "controlplane", false)})
	wantCode(t, "config without install disk", err, codes.InvalidArgument, "configuration validation failed:")
	if !strings.Contains(err.Error(), "install") {
		t.Fatalf("validation error does not name the install disk: %v", err)
	}
	_, err = ic.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte("machine: [")})
	if err == nil || !strings.Contains(err.Error(), "failed to parse config") {
		t.Fatalf("garbage config: %v", err)
	}
	_, err = ic.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: machineConfig(t, secrets, "controlplane", true), Mode: machine.ApplyConfigurationRequest_STAGED})
	wantCode(t, "staged in maintenance", err, codes.Unimplemented, "apply configuration --mode='staged' is not supported in maintenance mode")

	cfg := machineConfig(t, secrets, "controlplane", true)
	resp, err := ic.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg, DryRun: true})
	if err != nil || !strings.Contains(resp.Messages[0].ModeDetails, "does not have a config yet") {
		t.Fatalf("dry run: %v %v", resp, err)
	}
	if info, _ := h.Node(a); info.ConfigSHA256 != "" {
		t.Fatal("dry run applied the config")
	}
	if _, err := ic.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: cfg}); err != nil {
		t.Fatal(err)
	}
	// Metal installs, reboots, boots, runs.
	seen := map[runtime.MachineStage]bool{}
	down := false
	eventually(t, "installed and running", func() bool {
		info, _ := h.Node(a)
		seen[info.Stage] = true
		down = down || !info.Reachable
		return info.Stage == runtime.MachineStageRunning && info.Reachable
	})
	for _, s := range []runtime.MachineStage{runtime.MachineStageInstalling, runtime.MachineStageRebooting, runtime.MachineStageBooting} {
		if !seen[s] {
			t.Errorf("stage %s never seen (saw %v)", s, seen)
		}
	}
	if !down {
		t.Error("the machine never went down while it rebooted into the installed system")
	}
	// Now it serves mTLS with the config's CA.
	c := adminClient(t, secrets, a)
	v, err := c.Version(ctx)
	if err != nil || v.Messages[0].Version.Tag != "v1.12.6" || v.Messages[0].Platform.Mode != "metal" {
		t.Fatalf("Version: %v %v", v, err)
	}
	j, err := h.Journal(a)
	// Three refusals, a dry run, the apply.
	if err != nil || len(j) != 5 || j[4].Call != "ApplyConfiguration" || j[4].Error != "" || j[4].ConfigSHA256 != hashHex(cfg) ||
		j[0].Error == "" || !j[3].DryRun || j[4].Stage != "maintenance" {
		t.Fatalf("journal: %+v %v", j, err)
	}
}

func TestBootedNodeServesMTLSWithItsCA(t *testing.T) {
	h := openHost(t, "")
	a := addr(h, 1)
	secrets := bundle(t, "a")
	if err := h.Boot("vm-1", a, machineConfig(t, secrets, "controlplane", false)); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h, "vm-1")
	ctx := ctxT(t)
	c := adminClient(t, secrets, a)
	v, err := c.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := v.Messages[0]
	if m.Version.Tag != DefaultVersion || m.Metadata.GetHostname() != "talos-vm-1" || m.Platform.Name != "nocloud" || m.Platform.Mode != "cloud" || !m.Features.Rbac {
		t.Fatalf("Version: %+v", m)
	}
	// A talosconfig of another cluster's bundle is refused in the handshake.
	other := adminClient(t, bundle(t, "b"), a)
	if _, err := other.Version(ctx); err == nil || status.Code(err) != codes.Unavailable {
		t.Fatalf("other CA: %v", err)
	}
	// So is a client without a certificate.
	if _, err := insecureClient(t, a).Version(ctx); err == nil {
		t.Fatal("a client without a certificate got an answer")
	}
	// A reader may read, not write.
	rc := readerClient(t, secrets, a)
	if _, err := rc.Version(ctx); err != nil {
		t.Fatalf("reader Version: %v", err)
	}
	err = rc.Reboot(ctx)
	wantCode(t, "reader Reboot", err, codes.PermissionDenied, "not authorized")
}

func TestInvalidUserDataNeverBoots(t *testing.T) {
	h := openHost(t, "")
	a := addr(h, 2)
	bad := machineConfig(t, bundle(t, "a"), "worker", false)
	bad = []byte(strings.Replace(string(bad), "type: worker", "type: nonsense", 1))
	if err := h.Boot("vm-bad", a, bad); err != nil {
		t.Fatal(err)
	}
	info, _ := h.Node("vm-bad")
	if !strings.Contains(info.BootError, "failed to validate config acquired via platform nocloud") || info.Reachable || info.Stage != runtime.MachineStageBooting {
		t.Fatalf("node: %+v", info)
	}
	if c, err := net.DialTimeout("tcp", a+":50000", time.Second); err == nil {
		c.Close()
		t.Fatal("a node whose config is invalid accepts connections")
	}
}

func TestRecordsBecomeNodesAndGoWithTheirDisks(t *testing.T) {
	h := openHost(t, "")
	st, err := sim.Open(h.Dir())
	if err != nil {
		t.Fatal(err)
	}
	secrets := bundle(t, "a")
	rec, err := st.Create(sim.Spec{Name: "acme-cp-0", Tenant: "acme", NodeGroup: "cp", Role: "controlplane", Shape: "small",
		Image: "talos-1.12.5", UserData: machineConfig(t, secrets, "controlplane", false)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	info := waitRunning(t, h, rec.ID)
	if info.Address != rec.Address || info.Hostname != rec.Hostname || info.Version != "v1.12.5" || info.Origin != "record" {
		t.Fatalf("node of record: %+v", info)
	}
	ctx := ctxT(t)
	v, err := adminClient(t, secrets, rec.Address).Version(ctx)
	if err != nil || v.Messages[0].Version.Tag != "v1.12.5" || v.Messages[0].Platform.Name != "rezussim" {
		t.Fatalf("Version: %v %v", v, err)
	}
	if err := st.Delete(rec.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node gone", func() bool { _, ok := h.Node(rec.ID); return !ok })
	if _, err := os.Stat(st.DiskDir(rec.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("disk left: %v", err)
	}
	if c, err := net.DialTimeout("tcp", rec.Address+":50000", time.Second); err == nil {
		c.Close()
		t.Fatal("a deleted machine accepts connections")
	}
	if _, err := os.Stat(filepath.Join(h.Dir(), "sim.json")); err != nil {
		t.Fatal(err)
	}
}

// TestClusterNodesShareClientCAs: the nodes of a cluster with the same
// machine.ca share one pool of client CAs; a node of another CA (the same
// cluster name here) gets its own, and each refuses the other's clients.
func TestClusterNodesShareClientCAs(t *testing.T) {
	h := openHost(t, "")
	a, b := bundle(t, "a"), bundle(t, "b")
	for i, s := range [][]byte{a, a, b} {
		id := fmt.Sprint("vm-", i+1)
		if err := h.Boot(id, addr(h, i+1), machineConfig(t, s, "controlplane", false)); err != nil {
			t.Fatal(err)
		}
		waitRunning(t, h, id)
	}
	ctx := ctxT(t)
	for i, s := range [][]byte{a, a, b} {
		if _, err := adminClient(t, s, addr(h, i+1)).Version(ctx); err != nil {
			t.Fatalf("vm-%d with its own CA: %v", i+1, err)
		}
	}
	if _, err := adminClient(t, b, addr(h, 2)).Version(ctx); err == nil {
		t.Fatal("vm-2 answered a client of the other CA")
	}
	if _, err := adminClient(t, a, addr(h, 3)).Version(ctx); err == nil {
		t.Fatal("vm-3 answered a client of the other CA")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	pool := func(id string) *stdx509.CertPool { return h.byID[id].tls.ClientCAs }
	if pool("vm-1") != pool("vm-2") || pool("vm-1") == pool("vm-3") {
		t.Errorf("client CA pools: vm-1 %p, vm-2 %p, vm-3 %p; want vm-1 and vm-2 to share one", pool("vm-1"), pool("vm-2"), pool("vm-3"))
	}
	if h.byID["vm-1"].tls.Certificates[0].Leaf != nil {
		t.Error("a node keeps the parsed form of its certificate")
	}
}
