package ui

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// historyCommits is how many of the newest commits the tenant page reads
// for the tenant's history.
const historyCommits = 20

type tenantPage struct {
	T        schema.Tenant
	Groups   []schema.NodeGroup
	Machines []schema.Machine
	Stages   []stageCount
	Patches  []patchRow
	History  []historyRow
	// Downloads link the tenant's kubeconfig and talosconfig, for admins
	// of a server that serves them.
	Kubeconfig, Talosconfig string
	// Backups lists the tenant's backups, when the page shows them.
	Backups backupsView
	// The tenant's last day, drawn.
	tenantPictures
}

// stageCount is how many of the tenant's machines are in one stage.
type stageCount struct {
	Stage schema.MachineStage
	N     int
}

// patchRow is one config patch that applies to some of the tenant's
// machines, and which.
type patchRow struct {
	Name   string
	From   string // where it is declared
	Target string
	Patch  string
	// Machines counts the machines whose config carries it, for a
	// ConfigPatch object; -1 where the server does not count.
	Machines int
}

// historyRow is the tenant's result in one commit.
type historyRow struct {
	Commit commitSummary
	Result schema.TenantResult
}

func (h *handler) tenant(r *http.Request, v *view) (string, error) {
	name := r.PathValue("tenant")
	var p tenantPage
	sp := span{Since: v.Now.Add(-pictureWindow), Until: v.Now}
	err := h.srv.Store().View(func(tx store.Tx) error {
		v.RV = tx.ResourceVersion()
		if err := tx.GetObject(schema.KindTenant, name, &p.T); errors.Is(err, store.ErrNotFound) {
			return notFound("There is no tenant %q. The overview lists the tenants.", name)
		} else if err != nil {
			return err
		}
		var err error
		if p.Groups, err = objectsOf[schema.NodeGroup](tx, name, schema.KindNodeGroup); err != nil {
			return err
		}
		if p.Machines, err = objectsOf[schema.Machine](tx, name, schema.KindMachine); err != nil {
			return err
		}
		patches, err := objectsOf[schema.ConfigPatch](tx, name, schema.KindConfigPatch)
		if err != nil {
			return err
		}
		p.Patches = patchRows(&p.T, p.Groups, patches)
		if p.History, err = h.history(tx, name); err != nil {
			return err
		}
		slices.SortFunc(p.Machines, func(a, b schema.Machine) int {
			return cmp.Or(strings.Compare(a.Spec.NodeGroup, b.Spec.NodeGroup), strings.Compare(a.Spec.Hostname, b.Spec.Hostname),
				strings.Compare(a.Metadata.Name, b.Metadata.Name))
		})
		p.tenantPictures = h.drawTenant(tx, name, p.Machines, sp)
		return nil
	})
	if err != nil {
		return "", err
	}
	byName(p.Groups, func(g *schema.NodeGroup) string { return g.Metadata.Name })
	p.Stages = stagesOf(p.Machines)
	p.Backups = h.backups(r, v, &p.T)
	if v.Admin {
		base := "/api/v1/tenants/" + url.PathEscape(name)
		if h.srv.Routes(http.MethodGet, base+"/kubeconfig") {
			p.Kubeconfig, p.Talosconfig = base+"/kubeconfig", base+"/talosconfig"
		}
	}
	v.Title, v.Nav, v.Body = "Tenant "+name, "overview", p
	v.Watch = []string{"/api/v1/tenants/" + url.PathEscape(name) + "/events", "/api/v1/commits/events"}
	return "tenant", nil
}

// history returns the tenant's results in the newest applied commits,
// newest first.
func (h *handler) history(tx store.Tx, tenant string) ([]historyRow, error) {
	refs, err := commitRefs(tx)
	if err != nil {
		return nil, err
	}
	refs = slices.DeleteFunc(refs, isPreview)
	refs = refs[:min(len(refs), historyCommits)]
	sums, err := h.cache.summaries(tx, refs)
	if err != nil {
		return nil, err
	}
	var out []historyRow
	for i, ref := range refs {
		r, err := tx.Get(schema.KindCommit, ref.name)
		if err != nil {
			return nil, err
		}
		res, ok, err := tenantResult(r.Object, tenant)
		if err != nil {
			return nil, fmt.Errorf("commit %s: %w", ref.name, err)
		}
		if ok {
			out = append(out, historyRow{Commit: sums[i], Result: res})
		}
	}
	return out, nil
}

// stagesOf counts machines by stage, in life order, leaving out stages
// without machines.
func stagesOf(ms []schema.Machine) []stageCount {
	n := map[schema.MachineStage]int{}
	for _, m := range ms {
		n[stageOf(&m)]++
	}
	var out []stageCount
	for _, s := range append(slices.Clone(schema.MachineStages), "") {
		if n[s] > 0 {
			out = append(out, stageCount{Stage: s, N: n[s]})
		}
	}
	return out
}

// stageOf is a machine's observed stage; "" when nothing was observed.
func stageOf(m *schema.Machine) schema.MachineStage { return m.Status.Stage }

// patchRows lists the patches that apply to the tenant's machines: those
// of the tenant's spec (every machine), of node groups (theirs) and the
// ConfigPatch objects (every machine, or one role).
func patchRows(t *schema.Tenant, groups []schema.NodeGroup, patches []schema.ConfigPatch) []patchRow {
	var out []patchRow
	for _, np := range t.Spec.ConfigPatches {
		out = append(out, patchRow{Name: np.Name, From: "tenant " + t.Metadata.Name, Target: "every machine", Patch: np.Patch, Machines: -1})
	}
	for _, g := range groups {
		for _, np := range g.Spec.ConfigPatches {
			out = append(out, patchRow{Name: np.Name, From: "node group " + g.Metadata.Name,
				Target: "node group " + g.Metadata.Name, Patch: np.Patch, Machines: -1})
		}
	}
	byName(patches, func(p *schema.ConfigPatch) string { return p.Metadata.Name })
	for _, cp := range patches {
		target := "every machine"
		if cp.Spec.TargetRole != "" {
			target = "role " + cp.Spec.TargetRole
		}
		out = append(out, patchRow{Name: cp.Metadata.Name, From: "ConfigPatch", Target: target, Patch: cp.Spec.Patch, Machines: cp.Status.Machines})
	}
	return out
}
