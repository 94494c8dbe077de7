package talosnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/rezuscloud/rezuscloud/render/talos"
)

// testTimings keep stages short but long enough to be seen.
var testTimings = Timings{
	Boot: 150 * time.Millisecond, Install: 150 * time.Millisecond, Reboot: 300 * time.Millisecond,
	Upgrade: 150 * time.Millisecond, Reset: 150 * time.Millisecond, Fallback: 500 * time.Millisecond,
	LogInterval: 50 * time.Millisecond,
}

var testNow = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

var (
	bundlesMu sync.Mutex
	bundles   = map[string][]byte{}
)

// bundle returns a secrets bundle by name, generated once per test binary
// (each takes about a second).
func bundle(t testing.TB, name string) []byte {
	t.Helper()
	bundlesMu.Lock()
	defer bundlesMu.Unlock()
	if b, ok := bundles[name]; ok {
		return b
	}
	b, err := talos.GenerateSecrets("1.12.6", testNow, "")
	if err != nil {
		t.Fatal(err)
	}
	bundles[name] = b
	return b
}

// machineConfig renders a Talos config as RezusCloud does.
func machineConfig(t testing.TB, secrets []byte, role string, metal bool, patches ...string) []byte {
	t.Helper()
	in := talos.ConfigInput{
		ClusterName: "acme", ControlPlaneEndpoint: "https://127.9.9.9:6443",
		KubernetesVersion: "1.34.1", TalosVersion: "1.12.6", Role: role, Secrets: secrets, Now: testNow,
	}
	if metal {
		in.Mode, in.InstallDisk = talos.ModeMetal, "/dev/sda"
	}
	for i, p := range patches {
		in.Patches = append(in.Patches, talos.Patch{Name: fmt.Sprintf("p%d", i), Patch: p})
	}
	b, err := talos.MachineConfig(in)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openHost starts a host on a new sim dir with the test timings.
func openHost(t testing.TB, dir string) *Host {
	t.Helper()
	return openHostWith(t, dir, testTimings)
}

func openHostWith(t testing.TB, dir string, tm Timings) *Host {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	h, err := Open(Options{Dir: dir, Timings: tm, PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// addr returns 127.B.0.i of the host's block.
func addr(h *Host, i int) string {
	return netip.AddrFrom4([4]byte{127, byte(h.Block()), 0, byte(i)}).String()
}

// adminClient is a machinery client with an os:admin talosconfig of the
// bundle, as the Talos plane builds it.
func adminClient(t testing.TB, secrets []byte, endpoint string) *client.Client {
	t.Helper()
	b, err := talos.Talosconfig("acme", []string{endpoint}, secrets, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientconfig.FromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return newClient(t, client.WithConfig(cfg))
}

// readerClient has a certificate of the bundle's CA with role os:reader.
func readerClient(t testing.TB, secrets []byte, endpoint string) *client.Client {
	t.Helper()
	bundle, err := talos.ParseSecrets(secrets)
	if err != nil {
		t.Fatal(err)
	}
	crt, err := bundle.GenerateTalosAPIClientCertificate(role.MakeSet(role.Reader))
	if err != nil {
		t.Fatal(err)
	}
	return newClient(t, client.WithConfig(clientconfig.NewConfig("acme", []string{endpoint}, bundle.Certs.OS.Crt, crt)))
}

// insecureClient talks to the maintenance server.
func insecureClient(t testing.TB, endpoint string) *client.Client {
	t.Helper()
	return newClient(t, client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}), client.WithEndpoints(endpoint))
}

func newClient(t testing.TB, opts ...client.OptionFunc) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// machineStatus reads MachineStatus over COSI.
func machineStatus(ctx context.Context, c *client.Client) (*runtime.MachineStatusSpec, error) {
	ms, err := safe.StateGet[*runtime.MachineStatus](ctx, c.COSI, runtime.NewMachineStatus().Metadata())
	if err != nil {
		return nil, err
	}
	return ms.TypedSpec(), nil
}

// waitStage waits until the node (by key) is in stage and answers.
func waitRunning(t testing.TB, h *Host, key string) NodeInfo {
	t.Helper()
	var info NodeInfo
	eventually(t, key+" running", func() bool {
		info, _ = h.Node(key)
		return info.Stage == runtime.MachineStageRunning && info.Reachable
	})
	return info
}
