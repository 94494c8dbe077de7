package main

import (
	"time"

	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
	"github.com/rezuscloud/rezuscloud/internal/sim/openstack"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
)

// cloudFlags say where the credentials of real clouds are, and whether the
// server runs a simulated OpenStack of its own.
type cloudFlags struct {
	openstackClouds string
	ociConfig       string
	simOpenStack    string
	simAddresses    string
	simLatency      time.Duration
	// simWorld is the sim dir of a simulated world that another process
	// serves (`rezuscloud sim serve`).
	simWorld string
}

// SimCloudName is the clouds.yaml entry of the simulated OpenStack, as the
// OpenStack examples name it.
const SimCloudName = "rezus-openstack"

func addCloudFlags(fs *pflag.FlagSet, f *cloudFlags) {
	fs.StringVar(&f.openstackClouds, "openstack-clouds", "", "OpenStack clouds.yaml `FILE` (mode 0600) whose entries node groups name in providerConfig.cloud; default: $OS_CLIENT_CONFIG_FILE")
	fs.StringVar(&f.ociConfig, "oci-config", "", "OCI config `FILE` (mode 0600) whose profiles node groups name in providerConfig.profile; give key_file paths in it as absolute paths")
	fs.StringVar(&f.simOpenStack, "sim-openstack", "", "run a simulated OpenStack on loopback keeping its servers in `DIR`, and use its clouds.yaml (entry "+SimCloudName+"); needs --sim-cloud, whose simulated Talos nodes its servers boot as")
	fs.StringVar(&f.simWorld, "sim-world", "", "use the simulated world that 'rezuscloud sim serve --sim-dir DIR' runs in a process of its own: tofu creates the machines of node groups with providerClass sim in its sim `DIR`, and the Talos plane talks to them there, as several servers share one cloud; not with --sim-cloud")
	fs.StringVar(&f.simAddresses, "sim-openstack-addresses", openstack.DefaultAddresses.String(), "loopback `CIDR` the simulated OpenStack hands fixed IPs from")
	fs.DurationVar(&f.simLatency, "sim-openstack-latency", 0, "how long the simulated OpenStack waits before it answers each request, as a slow cloud's API does (for benchmarks)")
}

// clouds is what the real clouds add to every tofu run: the environment
// that points the providers at their credentials files, which are never
// copied, rendered or passed in argv.
type clouds struct {
	env   map[string]string
	sim   *openstack.Cloud
	close func()
}

// setupClouds checks the credentials files and starts the simulated
// OpenStack when asked, whose servers boot as simulated Talos nodes of
// nodes; getenv gives the default clouds.yaml.
func setupClouds(f *cloudFlags, dataDir string, getenv func(string) string, nodes *talosnode.Host, log *slog.Logger) (*clouds, error) {
	c := &clouds{env: map[string]string{}, close: func() {}}
	cloudsFile := f.openstackClouds
	if f.simOpenStack != "" {
		if cloudsFile != "" {
			return nil, errors.New("give --sim-openstack or --openstack-clouds, not both: the simulated OpenStack writes its own clouds.yaml")
		}
		sim, file, err := startSimOpenStack(f, openStackNodes(nodes, log))
		if err != nil {
			return nil, err
		}
		c.sim, c.close, cloudsFile = sim, func() { sim.Close() }, file
		log.Info("simulated OpenStack", "url", sim.URL(), "dir", f.simOpenStack, "addresses", f.simAddresses)
	} else if cloudsFile == "" {
		cloudsFile = getenv("OS_CLIENT_CONFIG_FILE")
	}
	if cloudsFile != "" {
		abs, err := checkCloudsFile(cloudsFile)
		if err != nil {
			c.close()
			return nil, err
		}
		c.env["OS_CLIENT_CONFIG_FILE"] = abs
	}
	if f.ociConfig != "" {
		home, err := ociHome(f.ociConfig, dataDir)
		if err != nil {
			c.close()
			return nil, err
		}
		c.env["TF_HOME_OVERRIDE"] = home
	}
	return c, nil
}

// checkPrivate returns the absolute path of a credentials file, refusing
// one that others than its owner may read.
func checkPrivate(what, path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s %s is not a regular file", what, abs)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%s %s has mode %04o, want 0600 (it holds credentials): run chmod 600 %s", what, abs, perm, abs)
	}
	return abs, nil
}

// checkCloudsFile checks a clouds.yaml: private, and a mapping with a
// clouds key. Its content is never logged.
func checkCloudsFile(path string) (string, error) {
	abs, err := checkPrivate("OpenStack clouds file", path)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(abs)
	if err != nil {
		return "", fmt.Errorf("OpenStack clouds file: %w", err)
	}
	var doc struct {
		Clouds map[string]any `json:"clouds"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil || len(doc.Clouds) == 0 {
		return "", fmt.Errorf("OpenStack clouds file %s: not a clouds.yaml with entries under \"clouds:\"", abs)
	}
	return abs, nil
}

// ociHome makes the home directory the OCI provider reads its config file
// from (TF_HOME_OVERRIDE/.oci/config): a private directory in the data dir
// whose .oci/config links to the operator's file.
func ociHome(config, dataDir string) (string, error) {
	abs, err := checkPrivate("OCI config file", config)
	if err != nil {
		return "", err
	}
	home := filepath.Join(dataDir, "oci-home")
	if err := os.MkdirAll(filepath.Join(home, ".oci"), 0o700); err != nil {
		return "", fmt.Errorf("OCI config: %w", err)
	}
	link := filepath.Join(home, ".oci", "config")
	if target, err := os.Readlink(link); err == nil && target == abs {
		return home, nil
	}
	os.Remove(link)
	if err := os.Symlink(abs, link); err != nil {
		return "", fmt.Errorf("OCI config: %w", err)
	}
	return home, nil
}

// startSimOpenStack runs the simulated OpenStack on a loopback port and
// writes DIR/clouds.yaml (0600) for it, with a password made for this run.
func startSimOpenStack(f *cloudFlags, hook openstack.Hook) (*openstack.Cloud, string, error) {
	dir := f.simOpenStack
	block, err := netip.ParsePrefix(f.simAddresses)
	if err != nil {
		return nil, "", fmt.Errorf("--sim-openstack-addresses: %w", err)
	}
	var b [18]byte
	rand.Read(b[:])
	sim, err := openstack.Open(openstack.Options{
		Dir: dir, Addresses: block, Hook: hook, Latency: f.simLatency,
		Credentials: openstack.Credentials{Username: "rezuscloud", Password: hex.EncodeToString(b[:]), ProjectName: "tenants"},
	})
	if err != nil {
		return nil, "", err
	}
	if err := sim.Serve("127.0.0.1:0"); err != nil {
		sim.Close()
		return nil, "", err
	}
	file := filepath.Join(dir, "clouds.yaml")
	if err := atomicfile.Write(file, sim.CloudsYAML(SimCloudName), 0o600); err != nil {
		sim.Close()
		return nil, "", err
	}
	return sim, file, nil
}
