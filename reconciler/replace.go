package reconciler

import (
	"context"
	"fmt"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
	"github.com/rezuscloud/rezuscloud/internal/redact"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/render"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TrailerAllowReplace in a commit message allows that commit to replace
// the control-plane machines of the tenants it names ("Rezuscloud-Allow-
// Replace: staging", several tenants separated by commas or spaces, or
// several trailers).
const TrailerAllowReplace = "Rezuscloud-Allow-Replace"

// allowsReplace reports whether the trailers allow replacing tenant's
// control planes.
func allowsReplace(trailers commitmsg.Trailers, tenant string) bool {
	return trailerNames(trailers, TrailerAllowReplace, tenant)
}

// trailerNames reports whether a trailer key of the commit names tenant
// among its values (separated by commas or spaces; several trailers of
// the key add up).
func trailerNames(trailers commitmsg.Trailers, key, tenant string) bool {
	for _, t := range trailers {
		if !strings.EqualFold(t.Key, key) {
			continue
		}
		for _, v := range strings.FieldsFunc(t.Value, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
			if v == tenant {
				return true
			}
		}
	}
	return false
}

// ReplaceError says that a plan would replace control-plane machines and
// the commit does not allow it. Only a new commit helps.
type ReplaceError struct {
	Tenant    string
	Addresses []string
}

func (e *ReplaceError) Error() string {
	return fmt.Sprintf("tenant %s: this commit would replace %d control-plane machines (%s): an attribute that cannot change in place changed, "+
		"and replacing control planes destroys their etcd members; nothing was applied. To replace them anyway, add the trailer \"%s: %s\" to the commit message",
		e.Tenant, len(e.Addresses), strings.Join(e.Addresses, ", "), TrailerAllowReplace, e.Tenant)
}

// replaceCheck returns the check a tenant's plan must pass before it is
// applied: it may replace control-plane machines only when the commit's
// trailers allow it. Destroying machines (a lower count, a node group that
// is gone) is declared in git and needs no trailer.
func replaceCheck(td *schema.TenantDesired, trailers commitmsg.Trailers) tofu.Check {
	tenant := td.Tenant.Metadata.Name
	cp := controlPlaneResources(td)
	return func(gone []tofu.PlannedChange) error {
		replaced := replacedControlPlanes(cp, gone)
		if len(replaced) == 0 || allowsReplace(trailers, tenant) {
			return nil
		}
		return stall(schema.ReasonReplaceBlocked, &ReplaceError{Tenant: tenant, Addresses: replaced})
	}
}

// controlPlaneResources are the TF resource names of the tenant's
// control-plane node groups.
func controlPlaneResources(td *schema.TenantDesired) map[string]bool {
	cp := map[string]bool{}
	for _, ng := range td.NodeGroups {
		if ng.Role() == schema.RoleControlPlane {
			cp[render.ResourceName(ng.Metadata.Name)] = true
		}
	}
	return cp
}

// replacedControlPlanes are the addresses of the control-plane machines a
// plan replaces (destroys and creates again).
func replacedControlPlanes(cp map[string]bool, gone []tofu.PlannedChange) []string {
	var replaced []string
	for _, c := range gone {
		if len(c.Actions) == 2 && cp[resourceNameOf(c.Address)] {
			replaced = append(replaced, c.Address)
		}
	}
	return replaced
}

// snapshotCheck wraps a plan check: before a plan that replaces
// control-plane machines is applied, a backup of the tenant's etcd is
// taken and waited for (snapshotGate), and the run's output names it.
// When the tenant declares backups, a snapshot that fails holds the
// apply back (a retry); otherwise it goes ahead without one.
func (t *tenantRun) snapshotCheck(ctx context.Context, check tofu.Check) tofu.Check {
	gate := t.snapshotGate()
	if gate == nil {
		return check
	}
	cp := controlPlaneResources(t.desired)
	return func(gone []tofu.PlannedChange) error {
		if err := check(gone); err != nil {
			return err
		}
		replaced := replacedControlPlanes(cp, gone)
		if len(replaced) == 0 || !t.r.backups.bootstrapped(t.name) {
			return nil
		}
		id, err := gate(ctx, "before the replacement of "+strings.Join(replaced, ", "))
		switch {
		case err != nil && t.desired.Tenant.Spec.Backup != nil:
			return retry(schema.ReasonBackupFailed, fmt.Errorf("a snapshot of etcd before control planes are replaced: %w", err))
		case err != nil:
			t.notes += "No snapshot of etcd before control planes are replaced (the tenant declares no backups): " + redact.Text(err.Error()) + "\n"
		default:
			t.notes += "Snapshot of etcd before control planes are replaced: backup " + id + "\n"
		}
		return nil
	}
}

// resourceNameOf returns the resource name of a TF address:
// "rezussim_machine.ng_cp[2]" → "ng_cp".
func resourceNameOf(addr string) string {
	if i := strings.IndexByte(addr, '['); i >= 0 {
		addr = addr[:i]
	}
	return addr[strings.LastIndexByte(addr, '.')+1:]
}
