package talosnode

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"sort"
	"sync"

	"github.com/cosi-project/runtime/pkg/resource"
	cosimeta "github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// servedKind is a kind of COSI resource the nodes serve: its definition,
// as Talos registers it, and the resources a call sees, which live in
// the definition's default namespace.
type servedKind struct {
	def  *cosimeta.ResourceDefinition
	list func(h *Host, c *call) ([]resource.Resource, error)
}

// servedNamespaces are the namespaces of the served kinds, with Talos's
// descriptions of them.
var servedNamespaces = map[resource.Namespace]string{
	cosimeta.NamespaceName: "Metadata namespace which contains resource and namespace definitions.",
	v1alpha1.NamespaceName: "Talos v1alpha1 subsystems glue resources.",
	config.NamespaceName:   "Talos node configuration.",
	cluster.NamespaceName:  "Cluster configuration and discovery resources.",
	hardware.NamespaceName: "Hardware information.",
	network.NamespaceName:  "Networks resources.",
}

var (
	kindsOnce sync.Once
	kinds     map[resource.Type]servedKind
)

// servedKinds returns every kind the nodes serve, by type: the meta
// namespace's resource definitions and namespaces, MachineStatus, the
// running MachineConfig, the cluster's Members, and the machine's
// inventory (inventory_resources.go): processors, memory modules, system
// information, disks and the system disk, host name, addresses, routes,
// links and extensions. A machine in maintenance mode serves these too,
// as Talos's maintenance API does for `talosctl get --insecure`. `talosctl get`
// resolves a name such as "machinestatus" or "members" through the
// definitions, so each served kind has its definition, and only those.
func servedKinds() map[resource.Type]servedKind {
	kindsOnce.Do(func() {
		kinds = map[resource.Type]servedKind{}
		add := func(p cosimeta.ResourceDefinitionProvider, list func(*Host, *call) ([]resource.Resource, error)) {
			def, err := cosimeta.NewResourceDefinition(p.ResourceDefinition())
			if err != nil {
				panic(err) // the definitions are machinery's own
			}
			def.Metadata().SetVersion(version(1))
			def.Metadata().SetOwner(cosimeta.Owner)
			kinds[def.TypedSpec().Type] = servedKind{def: def, list: list}
		}
		add(&cosimeta.ResourceDefinition{}, listDefinitions)
		add(&cosimeta.Namespace{}, listNamespaces)
		add(runtime.NewMachineStatus(), listMachineStatus)
		add(config.NewMachineConfig(nil), listMachineConfig)
		add(cluster.NewMember(cluster.NamespaceName, ""), listMembers)
		add(hardware.NewProcessorInfo(""), listInventory(processors))
		add(hardware.NewMemoryModuleInfo(""), listInventory(memoryModules))
		add(hardware.NewSystemInformation(""), listInventory(systemInformation))
		add(block.NewDisk(block.NamespaceName, ""), listInventory(disks))
		add(block.NewSystemDisk(block.NamespaceName, ""), listInventory(systemDisk))
		add(network.NewHostnameStatus(network.NamespaceName, ""), listInventory(hostnameStatus))
		add(network.NewNodeAddress(network.NamespaceName, ""), listInventory(nodeAddresses))
		add(network.NewRouteStatus(network.NamespaceName, ""), listInventory(routes))
		add(network.NewLinkStatus(network.NamespaceName, ""), listInventory(links))
		add(runtime.NewExtensionStatus(runtime.NamespaceName, ""), listInventory(extensionStatuses))
	})
	return kinds
}

// access checks a read of kind in namespace ns as Talos's resource API
// does: the type must be registered, a sensitive one needs os:admin, and
// the namespace must be registered. It returns the kind, or nil when the
// namespace holds none of it.
func access(c *call, ns resource.Namespace, typ resource.Type) (*servedKind, error) {
	k, ok := servedKinds()[typ]
	switch {
	case !ok:
		return nil, status.Errorf(codes.PermissionDenied, "resource type %q is not supported", typ)
	case k.def.TypedSpec().Sensitivity == cosimeta.Sensitive && !c.roles.Includes(role.Admin):
		return nil, errNotAuthorized
	}
	if _, ok := servedNamespaces[ns]; !ok {
		return nil, status.Errorf(codes.PermissionDenied, "namespace %q is not supported", ns)
	}
	if ns != k.def.TypedSpec().DefaultNamespace {
		return nil, nil
	}
	return &k, nil
}

func listDefinitions(*Host, *call) ([]resource.Resource, error) {
	var out []resource.Resource
	for _, k := range servedKinds() {
		out = append(out, k.def.DeepCopy())
	}
	return out, nil
}

func listNamespaces(*Host, *call) ([]resource.Resource, error) {
	var out []resource.Resource
	for ns, description := range servedNamespaces {
		r := cosimeta.NewNamespace(ns, cosimeta.NamespaceSpec{Description: description})
		r.Metadata().SetVersion(version(1))
		r.Metadata().SetOwner(cosimeta.Owner)
		out = append(out, r)
	}
	return out, nil
}

// listMachineStatus is the node's MachineStatus, id "machine", whose
// version moves whenever its spec changes.
func listMachineStatus(h *Host, c *call) ([]resource.Resource, error) {
	n := c.n
	h.mu.Lock()
	defer h.mu.Unlock()
	spec := h.machineStatus(n, h.now())
	if b, _ := json.Marshal(spec); string(b) != n.statusSpec {
		n.statusSpec = string(b)
		n.statusVersion++
	}
	r := runtime.NewMachineStatus()
	*r.TypedSpec() = spec
	r.Metadata().SetVersion(version(n.statusVersion))
	return []resource.Resource{r}, nil
}

// listMachineConfig is the node's running config, id "v1alpha1"; none in
// maintenance mode.
func listMachineConfig(h *Host, c *call) ([]resource.Resource, error) {
	h.mu.Lock()
	run, seq, dir := c.n.st.Running, c.n.seq, c.n.dir
	h.mu.Unlock()
	if run == nil {
		return nil, nil
	}
	b, err := h.readConfig(dir, run.Hash)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	r := config.NewMachineConfig(rawConfig{b: b})
	r.Metadata().SetVersion(version(seq + 1))
	return []resource.Resource{r}, nil
}

// listMembers is the node's cluster as Talos's discovery shows it: a
// Member per machine that joined it (has booted a config of the same
// cluster), by host name; none in maintenance mode.
func listMembers(h *Host, c *call) ([]resource.Resource, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	h.advance(c.n, now)
	var members []*node
	for m := range h.clusters[c.n.filedUnder] {
		members = append(members, m)
	}
	var out []resource.Resource
	for _, m := range members {
		h.advance(m, now)
		h.notifyMembers(m)
		if m.filedUnder == c.n.filedUnder {
			out = append(out, memberOf(m))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Metadata().ID() < out[j].Metadata().ID() })
	return out, nil
}

// memberOf is the Member resource of n. Called with h.mu held.
func memberOf(n *node) resource.Resource {
	r := cluster.NewMember(cluster.NamespaceName, n.hostname())
	spec := r.TypedSpec()
	spec.NodeID = nodeID(n.st.ID)
	spec.Addresses = []netip.Addr{n.addr}
	spec.Hostname = n.hostname()
	spec.MachineType = machine.TypeWorker
	if n.controlPlane() {
		spec.MachineType = machine.TypeControlPlane
		spec.ControlPlane = &cluster.ControlPlane{APIServerPort: 6443}
	}
	spec.OperatingSystem = fmt.Sprintf("Talos (%s)", n.st.Version)
	r.Metadata().SetVersion(version(n.memberVersion))
	return r
}

// memberKey is what n's Member shows, and the cluster it is filed under;
// "" for a machine that is no member. Called with h.mu held.
func memberKey(n *node) string {
	if n.filedUnder == "" {
		return ""
	}
	return fmt.Sprint(n.filedUnder, n.hostname(), n.addr, n.controlPlane(), n.st.Version)
}

// notifyMembers wakes the streams of n's cluster peers, and of its former
// cluster's, when n's Member changed: a machine joined, left, or shows
// another host name or version. Called with h.mu held.
func (h *Host) notifyMembers(n *node) {
	key := memberKey(n)
	if key == n.memberKey {
		return
	}
	was := n.memberOf
	n.memberKey, n.memberOf = key, n.filedUnder
	n.memberVersion++
	for _, cl := range []string{was, n.filedUnder} {
		for m := range h.clusters[cl] {
			if m != n {
				h.notify(m)
			}
		}
		if was == n.filedUnder {
			break
		}
	}
}

// nodeID is the node identity of a machine, as Talos's discovery shows it
// (base62 of 32 bytes), derived from its id.
func nodeID(id string) string {
	sum := sha256.Sum256([]byte("node-identity\x00" + id))
	return new(big.Int).SetBytes(sum[:]).Text(62)
}
