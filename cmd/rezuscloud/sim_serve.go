package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/internal/sim/openstack"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
)

// simServeFlags are the settings of `rezuscloud sim serve`, named as
// serve's settings of the simulated cloud that it runs with --sim-cloud.
type simServeFlags struct {
	config    string
	dir       string
	timings   string
	kubeBin   string
	openstack cloudFlags
	logLevel  string
	logFormat string
}

// newSimCmd builds `sim serve`.
func newSimCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the simulated world of tests and the demo in a process of its own",
	}
	cmd.AddCommand(newSimServeCmd(getenv))
	return cmd
}

func newSimServeCmd(getenv func(string) string) *cobra.Command {
	var f simServeFlags
	cmd := &cobra.Command{
		Use:   "serve --sim-dir DIR",
		Short: "Serve the simulated world: its machines as Talos nodes, and a simulated OpenStack",
		Long: `Serve the simulated world of a sim dir until SIGTERM or SIGINT: every machine
that the sim provider keeps in DIR answers the Talos API as a simulated Talos
node, from the moment the provider creates it until it deletes it, and with
--sim-openstack a simulated OpenStack runs on loopback, whose servers boot as
nodes of the same world. It is what 'rezuscloud serve --sim-cloud' runs in
the server's process, in a process of its own, so that several servers
('rezuscloud serve --sim-world DIR') share one simulated cloud as they share
a real one, and a server's restart does not restart the machines.

The world logs "simulated world serving" once the machines found in DIR
have booted. With --sim-openstack ODIR it writes ODIR/clouds.yaml (mode 0600)
of the simulated OpenStack (entry ` + SimCloudName + `, a new password at every start), which the
servers read with --openstack-clouds. The nodes' state stays on disk: the
next start on DIR goes on where this one stopped.

Every setting is a flag, an environment variable (REZUSCLOUD_ and the flag
name in upper case with '_' for '-') and a key of the YAML file given by
--config, as for serve.`,
		Example: `  rezuscloud sim serve --sim-dir /var/lib/rezussim &
  rezuscloud serve --data data-1 --repo https://git.example.com/clusters.git --sim-world /var/lib/rezussim`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return applyConfig(cmd.Flags(), getenv)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSimServe(cmd.Context(), &f, cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	addSimServeFlags(fs, &f)
	documentEnv(fs)
	return cmd
}

// addSimServeFlags defines the settings of `sim serve` on fs.
func addSimServeFlags(fs *pflag.FlagSet, f *simServeFlags) {
	fs.StringVar(&f.config, configFlag, "", "YAML `FILE` with further settings; keys are flag names")
	fs.StringVar(&f.dir, "sim-dir", "", "`DIR` of the simulated world: its machines, their disks and the state of their simulated Talos nodes; made when missing (required)")
	fs.StringVar(&f.timings, "sim-timings", "", "stage durations of the simulated nodes, e.g. boot=200ms,reboot=400ms,upgrade=300ms,fallback=2s (also install, reset, log); default: the nodes' own")
	fs.StringVar(&f.kubeBin, "sim-kube-bin", "", "`DIR` of the Kubernetes control plane's binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; scripts/kube.sh builds them) that the world runs for tenants whose sim node groups set providerConfig.kubernetesAPI; without it those tenants get no Kubernetes API")
	fs.StringVar(&f.openstack.simOpenStack, "sim-openstack", "", "also run a simulated OpenStack on loopback keeping its servers in `DIR`, whose servers boot as Talos nodes of this world; it writes DIR/clouds.yaml (mode 0600, entry "+SimCloudName+") for the servers' --openstack-clouds")
	fs.StringVar(&f.openstack.simAddresses, "sim-openstack-addresses", openstack.DefaultAddresses.String(), "loopback `CIDR` the simulated OpenStack hands fixed IPs from")
	fs.DurationVar(&f.openstack.simLatency, "sim-openstack-latency", 0, "how long the simulated OpenStack waits before it answers each request, as a slow cloud's API does (for benchmarks)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
}

// runSimServe serves the world until ctx ends or SIGTERM or SIGINT comes.
func runSimServe(ctx context.Context, f *simServeFlags, stderr io.Writer) error {
	log, err := newLogger(&serveFlags{logLevel: f.logLevel, logFormat: f.logFormat}, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	w, err := openSimWorld(f, log)
	if err != nil {
		return err
	}
	defer w.Close()
	return w.serve(ctx)
}

// simWorld is the simulated world of one sim dir: the Talos node host of
// its machines and, with --sim-openstack, a simulated OpenStack whose
// servers boot as nodes of the host.
type simWorld struct {
	dir   string
	log   *slog.Logger
	nodes *talosnode.Host
	// os is the simulated OpenStack; nil without --sim-openstack.
	os         *openstack.Cloud
	cloudsFile string
}

// openSimWorld starts the world that f describes. Its machines boot in the
// background; serve says when they have.
func openSimWorld(f *simServeFlags, log *slog.Logger) (*simWorld, error) {
	if f.dir == "" {
		return nil, fmt.Errorf("no sim dir: give --sim-dir or %s", envName("sim-dir"))
	}
	dir, err := filepath.Abs(f.dir)
	if err != nil {
		return nil, fmt.Errorf("--sim-dir: %w", err)
	}
	if err := worldFree(dir); err != nil {
		return nil, err
	}
	w := &simWorld{dir: dir, log: log}
	if w.nodes, err = openSimNodes(dir, f.timings, f.kubeBin, log); err != nil {
		return nil, err
	}
	if f.openstack.simOpenStack != "" {
		w.os, w.cloudsFile, err = startSimOpenStack(&f.openstack, openStackNodes(w.nodes, log))
		if err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

// worldFree refuses a sim dir whose block a live process holds: another
// world on the same dir, which an empty dir would otherwise leave for a
// block of its own while the servers' machines went on being made there.
func worldFree(dir string) error {
	store, err := sim.OpenExisting(dir)
	if errors.Is(err, sim.ErrNoSimDir) {
		return nil
	}
	if err != nil {
		return err
	}
	if store.Served() {
		return fmt.Errorf("--sim-dir %s: its address block %s is held by a live process, another 'rezuscloud sim serve' or a server with --sim-cloud on this dir; stop it first", dir, store.Block())
	}
	return nil
}

// serve waits until the machines found in the sim dir have booted, says
// that the world serves, and serves until ctx ends.
func (w *simWorld) serve(ctx context.Context) error {
	select {
	case <-w.nodes.Booted():
	case <-ctx.Done():
		return nil
	}
	attrs := []any{"dir", w.dir, "block", w.nodes.Block().String()}
	if w.os != nil {
		attrs = append(attrs, "openstack", w.os.URL(), "clouds", w.cloudsFile)
	}
	w.log.Info("simulated world serving", attrs...)
	<-ctx.Done()
	w.log.Info("simulated world stopping; its machines' state stays in the sim dir", "dir", w.dir)
	return nil
}

// Close stops the simulated OpenStack, then the nodes.
func (w *simWorld) Close() error {
	var errs []error
	if w.os != nil {
		errs = append(errs, w.os.Close())
	}
	errs = append(errs, w.nodes.Close())
	return errors.Join(errs...)
}
