package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/rezuscloud/rezuscloud/reconciler/talos"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/render/provider/metal"
	rtalos "github.com/rezuscloud/rezuscloud/render/talos"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Bare metal in a tenant's run: two steps of applySteps, around tofu's
// apply.
//
//   - ResetRemovedMetal runs before Apply: the metal machines the manifests
//     no longer use are reset (a control plane once it has left etcd)
//     while their records are still in state, so that a failed reset
//     keeps the record and the retry tries again; a machine that waits
//     in maintenance mode has nothing to reset;
//   - ConfigureMetal runs after Project: every machine of a metal node
//     group that still waits in maintenance mode gets its config. A
//     machine that does not answer makes the run a Retry, at the
//     Bootstrap step, once Finish has recorded the machines: the
//     observer then watches them, and a machine it sees enter
//     maintenance mode brings the retry forward (MetalWaiting). The
//     retry, and any later run of the tenant while a metal machine is
//     not reached, configures again without tofu (talosWanted).
//
// Both drive the metal functions of the Talos plane (reconciler/talos,
// metal.go) with the tenant's machines and secrets. Once configured, a
// metal machine is the plane's like any other: Bootstrap and Rollout
// compare and apply its own config (metalConfigs), never its group's.

// resetRemovedMetal is the ResetRemovedMetal step.
func (t *tenantRun) resetRemovedMetal(ctx context.Context) (stepResult, error) {
	var drainErr error
	drain := func(removed, stored []*schema.Machine) bool {
		drainErr = t.drainRemoved(ctx, removed, stored)
		return drainErr == nil
	}
	if err := t.r.resetRemovedMetal(ctx, t.desired, t.bundle, drain); err != nil {
		if drainErr != nil {
			return stepNext, drainErr
		}
		return stepNext, retry(schema.ReasonFailed, err)
	}
	return stepNext, nil
}

// configureMetal is the ConfigureMetal step. Its error waits in
// t.metalErr for the Bootstrap step, so that Finish records the machines
// first.
func (t *tenantRun) configureMetal(ctx context.Context) (stepResult, error) {
	t.metalErr = t.r.configureMetal(ctx, t.desired, t.ws, t.bundle, t.machines)
	return stepNext, nil
}

// MetalWaiting is told by the plane's observer that one of the tenant's
// machines waits in maintenance mode (talos.ObserverOptions.OnMaintenance):
// a run of the tenant that waits for its backoff starts now, and the run
// of its next revision configures the machine even when its manifests did
// not change.
func (r *Reconciler) MetalWaiting(tenant string) {
	res := r.hurry(tenant)
	r.log.Info("a machine waits in maintenance mode", "tenant", tenant, "action", res.Action, "message", res.Message)
}

// warnUnpinnedMetal logs a warning for each bare-metal machine in use
// whose maintenance certificate is not pinned (no fingerprint): the
// server gives such a machine its config, which holds the cluster's
// secrets, over TLS that it does not verify, so whoever answers at the
// address in maintenance mode receives them. A revision's validation calls
// it once, so each such machine is named once per revision.
func warnUnpinnedMetal(log *slog.Logger, revision string, desired *schema.Desired) {
	for _, td := range desired.Tenants {
		for _, ng := range td.NodeGroups {
			if ng.Spec.ProviderClass != metal.Class {
				continue
			}
			for i, m := range metal.Machines(ng) {
				if m.Fingerprint != "" {
					continue
				}
				log.Warn("bare-metal machine without a pinned fingerprint: whoever answers at its address in maintenance mode receives the cluster's secrets; pin its certificate with providerConfig.machines[].fingerprint",
					"revision", revision, "tenant", td.Tenant.Metadata.Name, "nodeGroup", ng.Metadata.Name, "address", m.Address,
					"source", ng.Source.Position(schema.JSONPointer("spec", "providerConfig", "machines", strconv.Itoa(i))))
			}
		}
	}
}

// metalAnswerTimeout bounds the apply of one metal machine's config.
const metalAnswerTimeout = 10 * time.Second

// metalGroups returns the tenant's metal node groups by name.
func metalGroups(td *schema.TenantDesired) map[string]*schema.NodeGroup {
	out := map[string]*schema.NodeGroup{}
	for _, ng := range td.NodeGroups {
		if ng.Spec.ProviderClass == metal.Class {
			out[ng.Metadata.Name] = ng
		}
	}
	return out
}

// usedAddresses returns the addresses the metal node groups use, by node
// group.
func usedAddresses(groups map[string]*schema.NodeGroup) map[string]map[string]metal.Machine {
	out := map[string]map[string]metal.Machine{}
	for name, ng := range groups {
		out[name] = map[string]metal.Machine{}
		for _, m := range metal.Machines(ng) {
			out[name][m.Address] = m
		}
	}
	return out
}

// resetRemovedMetal resets the tenant's stored metal machines whose node
// group no longer uses them, with the tenant's credentials; a control
// plane leaves etcd first, checked through a control plane that stays.
func (r *Reconciler) resetRemovedMetal(ctx context.Context, td *schema.TenantDesired, bundle []byte, drain func(removed, stored []*schema.Machine) bool) error {
	tenant := td.Tenant.Metadata.Name
	stored, err := r.storedMachines(tenant)
	if err != nil {
		return err
	}
	used := usedAddresses(metalGroups(td))
	var removed []*schema.Machine
	peerAddr := ""
	for _, m := range stored {
		if m.Spec.ProviderClass != metal.Class {
			if m.Spec.Role == schema.RoleControlPlane && peerAddr == "" {
				peerAddr = m.Spec.ManagementAddress
			}
			continue
		}
		if _, ok := used[m.Spec.NodeGroup][m.Spec.ManagementAddress]; !ok {
			removed = append(removed, m)
		} else if m.Spec.Role == schema.RoleControlPlane && peerAddr == "" {
			peerAddr = m.Spec.ManagementAddress
		}
	}
	if len(removed) > 0 && !drain(removed, stored) {
		return errors.New("the Nodes of the removed metal machines did not drain")
	}
	for _, m := range removed {
		if err := r.resetMetal(ctx, tenant, bundle, m, peerAddr); err != nil {
			return fmt.Errorf("reset metal machine %s at %s: %w", m.Metadata.Name, m.Spec.ManagementAddress, err)
		}
	}
	return nil
}

// resetMetal resets one removed machine. A machine that waits in
// maintenance mode (it never got its config, or was reset already) has
// nothing to reset: it counts as reset.
func (r *Reconciler) resetMetal(ctx context.Context, tenant string, bundle []byte, m *schema.Machine, peerAddr string) error {
	probe, cancel := context.WithTimeout(ctx, metalAnswerTimeout)
	pool := r.talosPool()
	inMaintenance := pool.InMaintenance(probe, m.Spec.ManagementAddress)
	cancel()
	if inMaintenance {
		r.log.Info("a removed metal machine waits in maintenance mode: nothing to reset", "tenant", tenant,
			"machine", m.Metadata.Name, "address", m.Spec.ManagementAddress)
		return nil
	}
	c, release, err := pool.Admin(tenant, bundle, m.Spec.ManagementAddress)
	if err != nil {
		return err
	}
	defer release()
	var peer *client.Client
	if peerAddr != "" {
		var releasePeer func()
		if peer, releasePeer, err = pool.Admin(tenant, bundle, peerAddr); err != nil {
			return err
		}
		defer releasePeer()
	}
	return talos.ResetRemoved(ctx, c, peer, m.Spec.Hostname, m.Spec.Role == schema.RoleControlPlane)
}

// configureMetal gives each projected machine of a metal node group that
// waits in maintenance mode its own config (metalConfigs). Machines that
// have their config already are left alone: the plane's rollout keeps
// them on it.
func (r *Reconciler) configureMetal(ctx context.Context, td *schema.TenantDesired, ws *render.Workspace, bundle []byte, machines []*schema.Machine) error {
	groups := metalGroups(td)
	if len(groups) == 0 {
		return nil
	}
	configs, err := metalConfigs(td, ws, machines)
	if err != nil {
		return err
	}
	used := usedAddresses(groups)
	var errs []error
	for _, m := range machines {
		cfg, ok := configs[m.Metadata.Name]
		if !ok {
			continue
		}
		mc := used[m.Spec.NodeGroup][m.Spec.ManagementAddress]
		if r.acceptsTenant(ctx, td.Tenant.Metadata.Name, bundle, mc.Address) {
			continue // configured already
		}
		if err := r.applyMetal(ctx, mc, cfg); err != nil && !errors.Is(err, talos.ErrNotInMaintenance) {
			errs = append(errs, fmt.Errorf("metal machine %s at %s: %w", m.Metadata.Name, mc.Address, err))
		}
	}
	return errors.Join(errs...)
}

// metalConfigs returns the config of each of machines that a metal node
// group uses, by machine id: its node group's with its own host name and
// install disk. The plane compares and applies these, never the bare
// group config, which would drop the host name.
func metalConfigs(td *schema.TenantDesired, ws *render.Workspace, machines []*schema.Machine) (map[string][]byte, error) {
	return metalConfigsOf(td, func(group string) []byte { return []byte(ws.Variables[render.MachineConfigVariable(group)]) }, machines)
}

// metalConfigsOf is metalConfigs from the node groups' configs that
// groupConfig gives.
func metalConfigsOf(td *schema.TenantDesired, groupConfig func(string) []byte, machines []*schema.Machine) (map[string][]byte, error) {
	used := usedAddresses(metalGroups(td))
	out := map[string][]byte{}
	for _, m := range machines {
		mc, ok := used[m.Spec.NodeGroup][m.Spec.ManagementAddress]
		if m.Spec.ProviderClass != metal.Class || !ok {
			continue
		}
		cfg, err := rtalos.MetalMachineConfig(groupConfig(m.Spec.NodeGroup), mc.Hostname, mc.InstallDisk)
		if err != nil {
			return nil, fmt.Errorf("metal machine %s at %s: %w", m.Metadata.Name, mc.Address, err)
		}
		out[m.Metadata.Name] = cfg
	}
	return out, nil
}

// acceptsTenant reports whether the machine at address answers the
// tenant's credentials, as a machine that has its config does.
func (r *Reconciler) acceptsTenant(ctx context.Context, tenant string, bundle []byte, address string) bool {
	c, release, err := r.talosPool().Admin(tenant, bundle, address)
	if err != nil {
		return false
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, metalAnswerTimeout)
	defer cancel()
	_, err = c.Version(ctx)
	return err == nil
}

// applyMetal gives a machine that waits in maintenance mode its config.
func (r *Reconciler) applyMetal(ctx context.Context, mc metal.Machine, cfg []byte) error {
	c, release, err := r.talosPool().Maintenance(mc.Address, mc.Fingerprint)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, metalAnswerTimeout)
	defer cancel()
	return talos.ApplyMaintenance(ctx, c, cfg)
}
