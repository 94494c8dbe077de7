package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/render/provider/metal"
	"github.com/rezuscloud/rezuscloud/schema"

	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/internal/sim/openstack"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
)

// The simulated cloud runs in the server's process only with --sim-cloud:
// tests and `rezuscloud demo` set it, a production server never needs it
// and runs no simulator code at all (no goroutine, no listener, no sim
// dir). With --sim-world the server uses a simulated cloud that another
// process serves (`rezuscloud sim serve`, sim_serve.go), as several
// servers share one real cloud: its tofu creates the world's machines and
// its Talos plane talks to them, but no simulator code runs in it either.
// Without one of the two, tenants whose node groups have providerClass sim
// stall (disabledClasses) and the settings of the simulated cloud are
// refused.

// openSimCloud serves the simulated cloud's machines as simulated Talos
// nodes, with --sim-cloud, or finds the world of --sim-world. It opens
// before the clouds (openTofu), so that the simulated OpenStack's servers
// boot as nodes of the same host, which closes after it.
func (p *reconcilerPart) openSimCloud() error {
	if p.f.clouds.simWorld != "" {
		return p.useSimWorld()
	}
	if !p.f.simCloud {
		return simSettingsWithoutSimCloud(p.f)
	}
	p.simDir = p.f.simDir
	if p.simDir == "" {
		p.simDir = defaultSimDir(p.dataDir)
	}
	// The machines boot in the background, as real ones boot whatever
	// their server does; the observer waits for them (start).
	nodes, err := openSimNodes(p.simDir, p.f.talos.simTimings, p.f.simKubeBin, p.log)
	if err != nil {
		return err
	}
	p.nodes = nodes
	p.m.onClose(func() { nodes.Close() })
	p.log.Info("simulated cloud", "dir", p.simDir)
	return nil
}

// openSimNodes starts the Talos node host of the sim dir, whose machines
// boot in the background (Host.Booted), with the stage durations of
// --sim-timings and the Kubernetes binaries of --sim-kube-bin.
func openSimNodes(dir, simTimings, kubeBin string, log *slog.Logger) (*talosnode.Host, error) {
	timings, err := parseSimTimings(simTimings)
	if err != nil {
		return nil, err
	}
	nodes, err := talosnode.Open(talosnode.Options{Dir: dir, Timings: timings, KubeBin: kubeBin, Logger: log.With("component", "simnodes"), Background: true})
	if err != nil {
		return nil, fmt.Errorf("simulated Talos nodes: %w", err)
	}
	return nodes, nil
}

// useSimWorld points the server at the simulated world of --sim-world: its
// sim dir, which `rezuscloud sim serve` made, is where the sim provider
// keeps the machines that the world's process serves. The world may be
// down while the server starts, as a real cloud may: its machines answer
// once it runs.
func (p *reconcilerPart) useSimWorld() error {
	if err := simSettingsOfWorld(p.f); err != nil {
		return err
	}
	dir, err := filepath.Abs(p.f.clouds.simWorld)
	if err != nil {
		return fmt.Errorf("--sim-world: %w", err)
	}
	world, err := sim.OpenExisting(dir)
	if err != nil {
		return fmt.Errorf("--sim-world: %w: give the --sim-dir of a running 'rezuscloud sim serve', which makes it", err)
	}
	p.simDir = dir
	if world.Served() {
		p.log.Info("simulated world", "dir", dir, "block", world.Block())
	} else {
		p.log.Warn("no simulated world serves --sim-world now: its machines answer once 'rezuscloud sim serve --sim-dir DIR' runs", "dir", dir, "block", world.Block())
	}
	return nil
}

// simSettingsOfWorld refuses, with --sim-world, the settings that belong
// to the world's own process or to a cloud in this one.
func simSettingsOfWorld(f *serveFlags) error {
	if f.simCloud {
		return fmt.Errorf("give --sim-cloud or --sim-world, not both: --sim-cloud runs a simulated cloud in this process, --sim-world uses the one 'rezuscloud sim serve' runs (%s, %s)", envName("sim-cloud"), envName("sim-world"))
	}
	given := simSettings(f)
	if len(given) == 0 {
		return nil
	}
	return fmt.Errorf("%s: settings of the simulated world, which 'rezuscloud sim serve' takes, not a server on --sim-world (%s); reach its simulated OpenStack with --openstack-clouds and the clouds.yaml it writes", strings.Join(given, ", "), envName("sim-world"))
}

// simSettingsWithoutSimCloud refuses the settings of the simulated cloud
// given without --sim-cloud, which alone runs it.
func simSettingsWithoutSimCloud(f *serveFlags) error {
	given := simSettings(f)
	if len(given) == 0 {
		return nil
	}
	return fmt.Errorf("%s: settings of the simulated cloud, which runs only with --sim-cloud (%s=true)", strings.Join(given, ", "), envName("sim-cloud"))
}

// simSettings names the settings given of a simulated cloud that runs in
// this process, sorted.
func simSettings(f *serveFlags) []string {
	var given []string
	for flag, v := range map[string]string{"sim-dir": f.simDir, "sim-timings": f.talos.simTimings, "sim-openstack": f.clouds.simOpenStack, "sim-kube-bin": f.simKubeBin} {
		if v != "" {
			given = append(given, "--"+flag)
		}
	}
	slices.Sort(given)
	return given
}

// disabledClasses are the provider classes the reconciler does not run,
// with why: providerClass sim without --sim-cloud or --sim-world.
func (p *reconcilerPart) disabledClasses() map[string]string {
	if p.simDir != "" {
		return nil
	}
	return map[string]string{schema.ProviderSim: fmt.Sprintf(
		"this server hosts no simulated cloud; start it with --sim-cloud (%s=true) to run one, as tests and 'rezuscloud demo' do, or with --sim-world DIR (%s) to use the one 'rezuscloud sim serve --sim-dir DIR' runs", envName("sim-cloud"), envName("sim-world"))}
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
