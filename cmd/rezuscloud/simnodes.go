package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/render/provider/metal"
	"github.com/rezuscloud/rezuscloud/schema"

	"github.com/rezuscloud/rezuscloud/internal/sim/openstack"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
)

// The simulated cloud runs in the server's process only with --sim-cloud:
// tests and `rezuscloud demo` set it, a production server never needs it
// and runs no simulator code at all (no goroutine, no listener, no sim
// dir). Without it, tenants whose node groups have providerClass sim stall
// (disabledClasses) and the settings of the simulated cloud are refused.

// openSimCloud serves the simulated cloud's machines as simulated Talos
// nodes, with --sim-cloud. It opens before the clouds (openTofu), so that
// the simulated OpenStack's servers boot as nodes of the same host, which
// closes after it.
func (p *reconcilerPart) openSimCloud() error {
	if !p.f.simCloud {
		return simSettingsWithoutSimCloud(p.f)
	}
	p.simDir = p.f.simDir
	if p.simDir == "" {
		p.simDir = defaultSimDir(p.dataDir)
	}
	timings, err := parseSimTimings(p.f.talos.simTimings)
	if err != nil {
		return err
	}
	// The machines boot in the background, as real ones boot whatever
	// their server does; the observer waits for them (start).
	nodes, err := talosnode.Open(talosnode.Options{Dir: p.simDir, Timings: timings, KubeBin: p.f.simKubeBin, Logger: p.log.With("component", "simnodes"), Background: true})
	if err != nil {
		return fmt.Errorf("simulated Talos nodes: %w", err)
	}
	p.nodes = nodes
	p.m.onClose(func() { nodes.Close() })
	p.log.Info("simulated cloud", "dir", p.simDir)
	return nil
}

// simSettingsWithoutSimCloud refuses the settings of the simulated cloud
// given without --sim-cloud, which alone runs it.
func simSettingsWithoutSimCloud(f *serveFlags) error {
	var given []string
	for flag, v := range map[string]string{"sim-dir": f.simDir, "sim-timings": f.talos.simTimings, "sim-openstack": f.clouds.simOpenStack, "sim-kube-bin": f.simKubeBin} {
		if v != "" {
			given = append(given, "--"+flag)
		}
	}
	if len(given) == 0 {
		return nil
	}
	slices.Sort(given)
	return fmt.Errorf("%s: settings of the simulated cloud, which runs only with --sim-cloud (%s=true)", strings.Join(given, ", "), envName("sim-cloud"))
}

// disabledClasses are the provider classes the reconciler does not run,
// with why: providerClass sim without --sim-cloud.
func (p *reconcilerPart) disabledClasses() map[string]string {
	if p.f.simCloud {
		return nil
	}
	return map[string]string{schema.ProviderSim: fmt.Sprintf(
		"this server hosts no simulated cloud; start it with --sim-cloud (%s=true) to run one, as tests and 'rezuscloud demo' do", envName("sim-cloud"))}
}

// defaultSimDir is where the simulated cloud lives without --sim-dir: a
// sibling of the data dir, "<data>-sim". The simulated cloud is another
// party than RezusCloud: its machines' disks hold their Talos configs, as a
// real machine's disk does, and must not rest inside RezusCloud's data dir.
func defaultSimDir(dataDir string) string {
	return filepath.Clean(dataDir) + "-sim"
}

// simCreateDelay is the sim provider's variable for a delay of every
// machine creation.
const simCreateDelay = "REZUSSIM_CREATE_DELAY"

// openStackNodes boots every server the simulated OpenStack creates as a
// simulated Talos node of nodes, on the server's fixed IP with the user
// data it was created with and the sizes of its flavor, and removes the
// node when the server is deleted. Servers restored at a restart need
// nothing: the host restores their nodes from its disks.
func openStackNodes(nodes *talosnode.Host, log *slog.Logger) openstack.Hook {
	return openstack.ServerHookFunc(func(ev openstack.Event, s openstack.Server) {
		var err error
		switch ev {
		case openstack.ServerCreated:
			m := talosnode.Machine{ID: s.ID, Address: s.Addr.String(), Platform: "openstack", UserData: s.UserData}
			if f := s.Flavor; f.VCPUs > 0 && f.RAMMiB > 0 {
				hw := talosnode.VMHardware(f.VCPUs, f.RAMMiB, f.DiskGiB)
				m.Hardware = &hw
			}
			err = nodes.BootMachine(m)
		case openstack.ServerDeleted:
			err = nodes.Remove(s.ID)
		}
		if err != nil {
			log.Warn("simulated OpenStack server as a Talos node", "server", s.ID, "event", ev.String(), "err", err)
		}
	})
}

// startDemoMetal powers on every machine the metal demo's manifests list,
// the spares too, as a simulated bare-metal machine of nodes waiting in
// maintenance mode at its address, and returns the addresses.
func startDemoMetal(nodes *talosnode.Host, cloud demoCloud) ([]string, error) {
	d, err := schema.Load(cloud.manifests, cloud.dir, nil)
	if err != nil {
		return nil, fmt.Errorf("metal demo: %w", err)
	}
	var addrs []string
	for _, td := range d.Tenants {
		for _, ng := range td.NodeGroups {
			for _, m := range metal.Listed(ng) {
				if err := nodes.StartMaintenance(m.Address); err != nil {
					return nil, fmt.Errorf("metal demo: %w", err)
				}
				addrs = append(addrs, m.Address)
			}
		}
	}
	return addrs, nil
}
