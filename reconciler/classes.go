package reconciler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/schema"
)

// providerClasses stalls a run whose tenant has node groups of a provider
// class the server does not run (Options.DisabledClasses): the declared
// ones for an apply, the applied ones for a destroy. Nothing of the tenant
// is applied or destroyed, and other tenants run as usual.
func (t *tenantRun) providerClasses(context.Context) (stepResult, error) {
	disabled := t.r.opts.DisabledClasses
	if len(disabled) == 0 {
		return stepNext, nil
	}
	byClass := map[string][]string{} // class → node groups
	if t.desired != nil {
		for _, ng := range t.desired.NodeGroups {
			byClass[ng.Spec.ProviderClass] = append(byClass[ng.Spec.ProviderClass], ng.Metadata.Name)
		}
	} else if t.prev != nil {
		for name, spec := range t.prev.Model.NodeGroups {
			byClass[spec.ProviderClass] = append(byClass[spec.ProviderClass], name)
		}
	}
	for _, class := range slices.Sorted(maps.Keys(byClass)) {
		why, off := disabled[class]
		if !off {
			continue
		}
		groups := slices.Sorted(slices.Values(byClass[class]))
		noun := "node group"
		if len(groups) > 1 {
			noun += "s"
		}
		return stepNext, stall(schema.ReasonProviderClassDisabled,
			fmt.Errorf("providerClass %s of %s %s: %s", class, noun, strings.Join(groups, ", "), why))
	}
	return stepNext, nil
}

// classesRun ends a drift check, unchecked, for a tenant whose node groups
// are of a class the server does not run: a server restarted without
// --sim-cloud has no simulated cloud to refresh against, and the tenant's
// next run stalls with the reason.
func (d *driftRun) classesRun(ctx context.Context) (stepResult, error) {
	if _, err := d.providerClasses(ctx); err != nil {
		d.unchecked = true
		return stepDone, nil
	}
	return stepNext, nil
}
