package reconciler

import (
	"fmt"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
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
	cp := map[string]bool{}
	for _, ng := range td.NodeGroups {
		if ng.Role() == schema.RoleControlPlane {
			cp[render.ResourceName(ng.Metadata.Name)] = true
		}
	}
	return func(gone []tofu.PlannedChange) error {
		var replaced []string
		for _, c := range gone {
			if len(c.Actions) == 2 && cp[resourceNameOf(c.Address)] {
				replaced = append(replaced, c.Address)
			}
		}
		if len(replaced) == 0 || allowsReplace(trailers, tenant) {
			return nil
		}
		return stall(schema.ReasonReplaceBlocked, &ReplaceError{Tenant: tenant, Addresses: replaced})
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
