package talosnode

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource"
	cosimeta "github.com/cosi-project/runtime/pkg/resource/meta"
	cosistate "github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
)

// talosctlGet does what `talosctl get NAME [ID]` does with one node: it
// resolves NAME through the node's resource definitions (the client's
// ResolveResourceKind, which also picks the default namespace), then
// lists the kind in that namespace, or gets the resource ID. Every
// resource must render as YAML, from which talosctl's table and YAML
// output are made.
func talosctlGet(ctx context.Context, c *client.Client, name, id string) (*cosimeta.ResourceDefinition, []resource.Resource, error) {
	var ns resource.Namespace
	rd, err := c.ResolveResourceKind(ctx, &ns, name)
	if err != nil {
		return nil, nil, err
	}
	ptr := resource.NewMetadata(ns, rd.TypedSpec().Type, id, resource.VersionUndefined)
	var items []resource.Resource
	if id != "" {
		r, err := c.COSI.Get(ctx, ptr)
		if err != nil {
			return rd, nil, err
		}
		items = []resource.Resource{r}
	} else {
		list, err := c.COSI.List(ctx, ptr)
		if err != nil {
			return rd, nil, err
		}
		items = list.Items
	}
	for _, r := range items {
		if _, err := resource.MarshalYAML(r); err != nil {
			return rd, nil, err
		}
	}
	return rd, items, nil
}

func ids(rs []resource.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Metadata().ID())
	}
	return out
}

// TestTalosctlGet: `talosctl get` works against a node for every kind it
// serves, by any of the names Talos registers for it (resource
// definitions with their aliases): machinestatus, machineconfig, members,
// resourcedefinitions and namespaces; other names and kinds get Talos's
// answers; a reader may not read the config; and a watch of the members
// sees a machine join.
func TestTalosctlGet(t *testing.T) {
	h := openHost(t, "")
	secrets := bundle(t, "a")
	cps, workers := bootCluster(t, h, secrets, 1, 1)
	for _, a := range append(slices.Clone(cps), workers...) {
		waitRunning(t, h, a)
	}
	ctx := ctxT(t)
	c := adminClient(t, secrets, cps[0])
	cpInfo, _ := h.Node(cps[0])
	wInfo, _ := h.Node(workers[0])

	for _, tc := range []struct {
		names []string
		typ   resource.Type
		ns    resource.Namespace
		ids   []string
	}{
		{[]string{"machinestatus", "machinestatuses", "ms", "MachineStatuses.runtime.talos.dev"}, runtime.MachineStatusType, runtime.NamespaceName, []string{runtime.MachineStatusID}},
		{[]string{"machineconfig", "mc", "machineconfigs.config"}, config.MachineConfigType, config.NamespaceName, []string{config.ActiveID}},
		{[]string{"members", "member"}, cluster.MemberType, cluster.NamespaceName, []string{cpInfo.Hostname, wInfo.Hostname}},
		{[]string{"rd", "resourcedefinitions", "api-resources"}, cosimeta.ResourceDefinitionType, cosimeta.NamespaceName, []string{
			"disks.block.talos.dev", "extensionstatuses.runtime.talos.dev", "hostnamestatuses.net.talos.dev", "linkstatuses.net.talos.dev",
			"machineconfigs.config.talos.dev", "machinestatuses.runtime.talos.dev", "members.cluster.talos.dev",
			"memorymodules.hardware.talos.dev", "namespaces.meta.cosi.dev", "nodeaddresses.net.talos.dev", "processors.hardware.talos.dev",
			"resourcedefinitions.meta.cosi.dev", "routestatuses.net.talos.dev", "systemdisks.block.talos.dev", "systeminformations.hardware.talos.dev"}},
		{[]string{"namespaces", "ns"}, cosimeta.NamespaceType, cosimeta.NamespaceName, []string{"cluster", "config", "hardware", "meta", "network", "runtime"}},
	} {
		want := slices.Clone(tc.ids)
		sort.Strings(want)
		for _, name := range tc.names {
			rd, items, err := talosctlGet(ctx, c, name, "")
			if err != nil {
				t.Fatalf("talosctl get %s: %v", name, err)
			}
			if rd.TypedSpec().Type != tc.typ || rd.TypedSpec().DefaultNamespace != tc.ns {
				t.Errorf("talosctl get %s resolved %s in %s, want %s in %s", name, rd.TypedSpec().Type, rd.TypedSpec().DefaultNamespace, tc.typ, tc.ns)
			}
			if got := ids(items); !slices.Equal(got, want) {
				t.Errorf("talosctl get %s: %v, want %v", name, got, want)
			}
		}
		// talosctl get NAME ID
		_, items, err := talosctlGet(ctx, c, tc.names[0], tc.ids[0])
		if err != nil || len(items) != 1 || items[0].Metadata().ID() != tc.ids[0] {
			t.Fatalf("talosctl get %s %s: %v, %v", tc.names[0], tc.ids[0], ids(items), err)
		}
	}

	// What the resources say.
	_, items, _ := talosctlGet(ctx, c, "machinestatus", "")
	if s := items[0].(*runtime.MachineStatus).TypedSpec(); s.Stage != runtime.MachineStageRunning {
		t.Errorf("machinestatus: %+v", s)
	}
	_, items, _ = talosctlGet(ctx, c, "members", cpInfo.Hostname)
	m := items[0].(*cluster.Member).TypedSpec()
	if m.Hostname != cpInfo.Hostname || m.MachineType != machine.TypeControlPlane || m.ControlPlane == nil ||
		len(m.Addresses) != 1 || m.Addresses[0].String() != cps[0] || m.OperatingSystem != "Talos ("+DefaultVersion+")" || m.NodeID == "" {
		t.Errorf("the control plane's member: %+v", m)
	}
	_, items, _ = talosctlGet(ctx, c, "rd", "members.cluster.talos.dev")
	if aliases := items[0].(*cosimeta.ResourceDefinition).TypedSpec().AllAliases; !slices.Contains(aliases, "member") || !slices.Contains(aliases, "members") {
		t.Errorf("the members' aliases: %v", aliases)
	}

	// Names and kinds the nodes do not serve.
	_, _, err := talosctlGet(ctx, c, "volumestatuses", "")
	wantCode(t, "talosctl get volumestatuses", err, codes.NotFound, `resource "volumestatuses" is not registered`)
	_, err = c.COSI.List(ctx, resource.NewMetadata("runtime", "VolumeStatuses.block.talos.dev", "", resource.VersionUndefined))
	wantCode(t, "a list of volume statuses", err, codes.PermissionDenied, `resource type "VolumeStatuses.block.talos.dev" is not supported`)
	_, err = c.COSI.List(ctx, resource.NewMetadata("network-config", runtime.MachineStatusType, "", resource.VersionUndefined))
	wantCode(t, "a list in another namespace", err, codes.PermissionDenied, `namespace "network-config" is not supported`)
	if list, err := c.COSI.List(ctx, resource.NewMetadata(config.NamespaceName, runtime.MachineStatusType, "", resource.VersionUndefined)); err != nil || len(list.Items) != 0 {
		t.Errorf("machine statuses in the config namespace: %v, %v", ids(list.Items), err)
	}
	if _, _, err = talosctlGet(ctx, c, "members", "nobody"); !cosistate.IsNotFoundError(err) {
		t.Errorf("talosctl get members nobody: %v, want not found", err)
	}

	// A reader resolves and reads all but the config.
	reader := readerClient(t, secrets, workers[0])
	if _, items, err := talosctlGet(ctx, reader, "members", ""); err != nil || len(items) != 2 {
		t.Fatalf("a reader's talosctl get members: %v, %v", ids(items), err)
	}
	_, _, err = talosctlGet(ctx, reader, "machineconfig", "")
	wantCode(t, "a reader's talosctl get machineconfig", err, codes.PermissionDenied, "not authorized")

	// A node in maintenance mode resolves names too, and is in no cluster.
	a := addr(h, 40)
	if err := h.StartMaintenance(a); err != nil {
		t.Fatal(err)
	}
	eventually(t, a+" in maintenance mode", func() bool {
		info, _ := h.Node(a)
		return info.Stage == runtime.MachineStageMaintenance && info.Reachable
	})
	maint := insecureClient(t, a)
	if _, items, err := talosctlGet(ctx, maint, "machinestatus", ""); err != nil || len(items) != 1 || items[0].(*runtime.MachineStatus).TypedSpec().Stage != runtime.MachineStageMaintenance {
		t.Fatalf("talosctl get machinestatus --insecure: %v, %v", ids(items), err)
	}
	if _, items, err := talosctlGet(ctx, maint, "members", ""); err != nil || len(items) != 0 {
		t.Fatalf("talosctl get members --insecure: %v, %v", ids(items), err)
	}

	// talosctl get members -w: what there is, then a machine that joins.
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	events := make(chan cosistate.Event)
	if err := c.COSI.WatchKind(watchCtx, resource.NewMetadata(cluster.NamespaceName, cluster.MemberType, "", resource.VersionUndefined), events, cosistate.WithBootstrapContents(true)); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for ev := range events {
		if ev.Type == cosistate.Bootstrapped {
			break
		}
		seen = append(seen, ev.Resource.Metadata().ID())
	}
	if len(seen) != 2 {
		t.Fatalf("the watch began with %v", seen)
	}
	if err := h.Boot("vm-joins", addr(h, 30), machineConfig(t, secrets, "worker", false)); err != nil {
		t.Fatal(err)
	}
	joined, _ := h.Node(addr(h, 30))
	for ev := range events {
		if ev.Type == cosistate.Errored {
			t.Fatalf("the watch: %v", ev.Error)
		}
		if ev.Type == cosistate.Created && ev.Resource.Metadata().ID() == joined.Hostname {
			if !strings.HasPrefix(ev.Resource.(*cluster.Member).TypedSpec().OperatingSystem, "Talos (") {
				t.Fatalf("the joined member: %+v", ev.Resource)
			}
			break
		}
	}
}
