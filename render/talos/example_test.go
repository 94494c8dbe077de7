package talos_test

import (
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/render/talos"
)

func ExampleMachineConfig() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Once per tenant; the caller keeps the bundle and passes it back.
	bundle, err := talos.GenerateSecrets("1.12.6", now, "")
	if err != nil {
		log.Fatal(err)
	}
	in := talos.ConfigInput{
		ClusterName:          "alpha",
		ControlPlaneEndpoint: "https://10.0.0.10:6443",
		KubernetesVersion:    "1.34.1",
		TalosVersion:         "1.12.6",
		Role:                 talos.RoleWorker,
		Secrets:              bundle,
		Patches: []talos.Patch{
			{Name: "labels", Source: "tenants/alpha.yaml:12", Patch: "machine:\n  nodeLabels:\n    tier: web\n"},
		},
	}
	cfg, err := talos.MachineConfig(in)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Join(strings.Split(string(cfg), "\n")[:5], "\n"))

	in.Patches = append(in.Patches, talos.Patch{Name: "mtu", Source: "nodegroups/web.yaml:30", Patch: "machine:\n  network: [\n"})
	_, err = talos.MachineConfig(in)
	var pe *talos.PatchError
	fmt.Println(errors.As(err, &pe), pe.Patch.Name, pe.Patch.Source)
	// Output:
	// version: v1alpha1
	// debug: false
	// persist: true
	// machine:
	//     type: worker
	// true mtu nodegroups/web.yaml:30
}
