package talos

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/schema"
)

// InMaintenance reports whether the machine at address serves Talos's
// maintenance API: a client that asks for no identity of the server and
// shows none of its own completes the handshake, and the machine answers
// (maintenance mode implements Version for no one, or for everyone). A
// machine that has a config refuses that client in the handshake. It
// only looks: nothing is sent to the machine but the Version request.
func (p *Pool) InMaintenance(ctx context.Context, address string) bool {
	c, release, err := p.Maintenance(address, "")
	if err != nil {
		return false
	}
	defer release()
	_, err = c.Version(ctx)
	switch status.Code(err) {
	case codes.OK, codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// withMaintenance completes the observation of a machine that refused the
// tenant's credentials in the handshake: when it waits in maintenance mode
// (a bare-metal machine before it got its config, or reset), its stage
// says so. It stays not connected: the tenant's credentials do not reach
// it.
func (p *Pool) withMaintenance(ctx context.Context, o Observation, address string) Observation {
	if o.Connected || !isHandshake(o.Error) || !p.InMaintenance(ctx, address) {
		return o
	}
	o.TalosStage, o.Stage, o.Maintenance = "maintenance", schema.StageMaintenance, true
	return o
}

// maintenanceInventory reads the inventory of a machine in maintenance
// mode into o through a maintenance client (Talos serves its hardware,
// network and extensions there without a client certificate), when o is
// the first observation that finds it there; later ones carry prev's.
func (p *Pool) maintenanceInventory(ctx context.Context, o, prev Observation, address string) Observation {
	if !o.Maintenance {
		return o
	}
	if prev.Maintenance && prev.Hardware != nil {
		return carryInventory(o, prev)
	}
	c, release, err := p.Maintenance(address, "")
	if err != nil {
		return o
	}
	defer release()
	arch := ""
	if v, err := c.Version(ctx); err == nil && len(v.GetMessages()) > 0 {
		arch = v.GetMessages()[0].GetVersion().GetArch()
	}
	_ = o.readInventory(ctx, c, arch, allInventory) // a machine that serves none of it has none
	return o
}
