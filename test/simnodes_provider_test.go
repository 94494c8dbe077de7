package test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/rezuscloud/rezuscloud/internal/sim"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
	"github.com/rezuscloud/rezuscloud/internal/testenv"
	"github.com/rezuscloud/rezuscloud/render/talos"
)

const simNodesTF = `
terraform {
  required_providers {
    rezussim = { source = "rezuscloud.io/rezuscloud/rezussim" }
  }
}

variable "n" { type = number }

provider "rezussim" {
  dir = "MACHINES"
}

resource "rezussim_machine" "cp" {
  count      = var.n
  name       = "acme-cp-${count.index}"
  tenant     = "acme"
  node_group = "cp"
  role       = "controlplane"
  shape      = "small"
  image      = "talos-1.12.6"
  user_data  = file("${path.module}/cp.yaml")
}
`

// talosClient is a machinery client with an os:admin talosconfig of a
// bundle, as the Talos plane makes it.
func talosClient(t *testing.T, bundle []byte, endpoint string) *client.Client {
	t.Helper()
	b, err := talos.Talosconfig("acme", []string{endpoint}, bundle, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientconfig.FromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(context.Background(), client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSimProviderMachinesAreTalosNodes runs the real rezussim provider
// under the real tofu: the machines it creates carry their Talos config
// on their own disks, and the node host serves each as a Talos node.
func TestSimProviderMachinesAreTalosNodes(t *testing.T) {
	w := newSimWorkspace(t, testenv.ProviderMirror(t), simNodesTF)
	bundle, err := talos.GenerateSecrets("1.12.6", time.Now(), "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := talos.MachineConfig(talos.ConfigInput{
		ClusterName: "acme", ControlPlaneEndpoint: "https://127.9.9.9:6443", KubernetesVersion: "1.34.1",
		TalosVersion: "1.12.6", Role: "controlplane", Secrets: bundle,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.dir, "cp.yaml"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	host, err := talosnode.Open(talosnode.Options{Dir: w.machines, Timings: talosnode.Timings{Boot: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()

	w.must("init", "-input=false")
	w.apply(2)
	store, err := sim.Open(w.machines)
	if err != nil {
		t.Fatal(err)
	}
	if store.Block() != host.Block() {
		t.Fatalf("the provider used block %s, the host %s", store.Block(), host.Block())
	}
	recs, err := store.List()
	if err != nil || len(recs) != 2 {
		t.Fatalf("records: %d, %v", len(recs), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range recs {
		// The disk holds the config, privately; the record only its hash.
		disk := filepath.Join(store.DiskDir(r.ID), sim.UserDataFile)
		fi, err := os.Stat(disk)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: disk %v %v", r.ID, fi, err)
		}
		if got, _ := os.ReadFile(disk); !bytes.Equal(got, cfg) {
			t.Fatalf("%s: the disk does not hold the user data", r.ID)
		}
		rb, _ := os.ReadFile(store.Path(r.ID))
		if bytes.Contains(rb, []byte("BEGIN")) || bytes.Contains(rb, []byte("machine:")) {
			t.Fatalf("%s: the record holds the config:\n%s", r.ID, rb)
		}
		if r.UserDataSHA256 != sim.HashUserData(cfg) {
			t.Fatalf("%s: record hash %s", r.ID, r.UserDataSHA256)
		}

		// The machine answers the Talos API with mTLS from its config's CA.
		c := talosClient(t, bundle, r.Address)
		var v string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			resp, err := c.Version(ctx)
			if err == nil {
				v = resp.Messages[0].Version.Tag
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s at %s: %v", r.ID, r.Address, err)
			}
		}
		if v != "v1.12.6" {
			t.Fatalf("%s: version %s", r.ID, v)
		}
		// apid answers while the machine boots; then it runs.
		info, _ := host.Node(r.ID)
		for deadline := time.Now().Add(10 * time.Second); info.Stage != runtime.MachineStageRunning && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			info, _ = host.Node(r.ID)
		}
		if info.Stage != runtime.MachineStageRunning || info.ConfigSHA256 != r.UserDataSHA256 || info.Hostname != r.Hostname || info.Origin != "record" {
			t.Fatalf("%s: node %+v", r.ID, info)
		}
	}

	w.must("destroy", "-auto-approve", "-input=false", "-var=n=2")
	if err := host.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if _, ok := host.Node(r.ID); ok {
			t.Fatalf("%s still served after destroy", r.ID)
		}
		if c, err := net.DialTimeout("tcp", r.Address+":50000", time.Second); err == nil {
			c.Close()
			t.Fatalf("%s: %s still accepts connections", r.ID, r.Address)
		}
		if _, err := os.Stat(store.DiskDir(r.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: disk left after destroy: %v", r.ID, err)
		}
	}
}
