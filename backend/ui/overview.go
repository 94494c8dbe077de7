package ui

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// How many commits the overview shows in its list and its timeline, how
// many of the newest it reads for each tenant's last result, and how many
// tenants one page of it lists.
const (
	overviewCommits  = 5
	timelineCommits  = 30
	lastResultCommit = 3
	tenantsPerPage   = 100
)

type overviewPage struct {
	// Tenants is one page of the tenants, the failing ones first.
	Tenants    []tenantRow
	Page       int
	Prev, Next string
	Failing    int
	Counts     api.ResourceCounts
	Source     *api.SourceStatus
	// Replicas are the server's replicas, nil on a server that runs alone.
	Replicas *api.ReplicasStatus
	Problem  string // why the source's status could not be read
	Recent   []commitSummary
	Timeline []commitSummary // oldest first
}

// tenantRow is one tenant of the overview.
type tenantRow struct {
	T        *schema.Tenant
	Result   *schema.TenantResult // of the newest commit that has one
	Commit   string               // that commit's name
	Failing  bool
	Retrying bool
	// Avail is its availability over the last day.
	Avail availability
}

func (h *handler) overview(r *http.Request, v *view) (string, error) {
	page, err := pageOf(r)
	if err != nil {
		return "", err
	}
	p := overviewPage{Page: page}
	st, err := h.srv.Status()
	if err != nil {
		return "", err
	}
	p.Counts, p.Source, p.Replicas, p.Problem = st.Counts, st.Source, st.Replicas, st.Error
	err = h.srv.Store().View(func(tx store.Tx) error {
		v.RV = tx.ResourceVersion()
		tenants, err := tenantsOf(tx)
		if err != nil {
			return err
		}
		refs, err := commitRefs(tx)
		if err != nil {
			return err
		}
		applied := slices.DeleteFunc(refs, isPreview)
		recent, err := h.cache.summaries(tx, applied[:min(len(applied), timelineCommits)])
		if err != nil {
			return err
		}
		p.Recent = recent[:min(len(recent), overviewCommits)]
		p.Timeline = slices.Clone(recent)
		slices.Reverse(p.Timeline)
		p.Tenants = make([]tenantRow, len(tenants))
		for i := range tenants {
			p.Tenants[i] = tenantRow{T: &tenants[i]}
		}
		return lastResults(tx, applied[:min(len(applied), lastResultCommit)], p.Tenants)
	})
	if err != nil {
		return "", err
	}
	for i := range p.Tenants {
		row := &p.Tenants[i]
		row.Failing = failing(row.T, row.Result)
		row.Retrying = row.T.Status.Retry != nil && row.T.Status.Retry.Attempts > 0
		if row.Failing {
			p.Failing++
		}
	}
	slices.SortStableFunc(p.Tenants, func(a, b tenantRow) int {
		return cmp.Or(cmp.Compare(urgency(a), urgency(b)), strings.Compare(a.T.Metadata.Name, b.T.Metadata.Name))
	})
	start := (page - 1) * tenantsPerPage
	if start >= len(p.Tenants) && page > 1 {
		return "", notFound("There is no page %d of the tenants: there are %d, %d to a page.", page, len(p.Tenants), tenantsPerPage)
	}
	if page > 1 {
		p.Prev = "/?page=" + itoa(page-1)
	}
	if start+tenantsPerPage < len(p.Tenants) {
		p.Next = "/?page=" + itoa(page+1)
	}
	p.Tenants = p.Tenants[start:min(start+tenantsPerPage, len(p.Tenants))]
	if err := h.availabilities(p.Tenants, span{Since: v.Now.Add(-pictureWindow), Until: v.Now}); err != nil {
		return "", err
	}
	v.Title, v.Nav, v.Body = "Overview", "overview", p
	v.Watch = []string{"/api/v1/tenants?watch=true", "/api/v1/commits/events"}
	return "overview", nil
}

// availabilities draws each row's availability over sp; a tenant whose
// history cannot be read is logged and shows no bar.
func (h *handler) availabilities(rows []tenantRow, sp span) error {
	return h.srv.Store().View(func(tx store.Tx) error {
		for i := range rows {
			hist, err := tenantHistory(tx, rows[i].T.Metadata.Name, sp)
			if err != nil {
				h.log.Error("dashboard: tenant history", "tenant", rows[i].T.Metadata.Name, "err", err)
				continue
			}
			var firsts []time.Time
			if len(hist.Availability) > 0 {
				firsts = append(firsts, hist.Availability[0].At)
			}
			rows[i].Avail = availabilityBar(hist.Availability, zoom(sp, firsts...))
		}
		return nil
	})
}

// lastResults gives every row the result of the newest of the commits refs
// (newest first) that has one for its tenant.
func lastResults(tx store.Tx, refs []commitRef, rows []tenantRow) error {
	index := make(map[string]*tenantRow, len(rows))
	for i := range rows {
		index[rows[i].T.Metadata.Name] = &rows[i]
	}
	for _, ref := range refs {
		if len(index) == 0 {
			return nil
		}
		var c schema.Commit
		if err := tx.GetObject(schema.KindCommit, ref.name, &c); err != nil {
			return err
		}
		for i := range c.Status.Tenants {
			res := &c.Status.Tenants[i]
			if row := index[res.Tenant]; row != nil {
				row.Result, row.Commit = res, ref.name
				delete(index, res.Tenant)
			}
		}
	}
	return nil
}

// failing reports a tenant that needs someone: its last run failed, or it
// is stalled until a new commit.
func failing(t *schema.Tenant, res *schema.TenantResult) bool {
	return (res != nil && res.Phase == schema.CommitFailed) || t.Status.Conditions.IsTrue(schema.ConditionStalled)
}

// urgency orders the overview: failing tenants, then retrying ones, then
// those on their way somewhere, then the rest.
func urgency(r tenantRow) int {
	switch {
	case r.Failing:
		return 0
	case r.Retrying:
		return 1
	case r.T.Status.Phase != schema.TenantActive || !r.T.Status.Ready:
		return 2
	}
	return 3
}

func isPreview(r commitRef) bool { return strings.HasPrefix(r.name, schema.PreviewCommitName("")) }
