package main

import (
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/rezuscloud/rezuscloud/render/provider/metal"
	"github.com/rezuscloud/rezuscloud/schema"

	"github.com/rezuscloud/rezuscloud/internal/sim/openstack"
	"github.com/rezuscloud/rezuscloud/internal/sim/talosnode"
)

// openStackNodes boots every server the simulated OpenStack creates as a
// simulated Talos node of nodes, on the server's fixed IP with the user
// data it was created with, and removes the node when the server is
// deleted. Servers restored at a restart need nothing: the host restores
// their nodes from its disks.
func openStackNodes(nodes *talosnode.Host, log *slog.Logger) openstack.Hook {
	return openstack.HookFunc(func(ev openstack.Event, id string, addr netip.Addr, userData []byte) {
		var err error
		switch ev {
		case openstack.ServerCreated:
			err = nodes.BootMachine(talosnode.Machine{ID: id, Address: addr.String(), Platform: "openstack", UserData: userData})
		case openstack.ServerDeleted:
			err = nodes.Remove(id)
		}
		if err != nil {
			log.Warn("simulated OpenStack server as a Talos node", "server", id, "event", ev.String(), "err", err)
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
