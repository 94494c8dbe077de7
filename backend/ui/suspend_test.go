package ui

import (
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestTenantPageSuspended: the page of a suspended tenant says so and
// shows what waits: the held-back revision and its summary, or a removal.
func TestTenantPageSuspended(t *testing.T) {
	r := filled(t, rigOptions{})
	objs := fleet("paused", 1, 1)
	tn := objs[0].(*schema.Tenant)
	tn.Status.Pending = &schema.PendingChanges{Revision: sha(4), Summary: "node group workers scaled 1 → 3; machines +2 -0", Since: testNow.Add(-10 * time.Minute)}
	tn.Status.Conditions = schema.Conditions{{Type: schema.ConditionSuspended, Status: schema.ConditionTrue, Reason: schema.ReasonSuspended, Message: "held back"}}
	r.put(objs...)
	page := body(t, r.do("GET", "/tenants/paused", nil, ""), 200)
	contains(t, "suspended tenant", page, `<span class="badge cond-held" title="Suspended: held back">suspended</span>`, "<dt>Pending</dt>",
		`href="/commits/`+sha(4)+`"`, "node group workers scaled 1 → 3; machines &#43;2 -0", "10m ago")

	tn.Status.Pending = &schema.PendingChanges{Revision: sha(5), Deletion: true, Since: testNow}
	r.put(objs...)
	page = body(t, r.do("GET", "/tenants/paused", nil, ""), 200)
	contains(t, "suspended tenant removed from git", page, "removal from git in", `href="/commits/`+sha(5)+`"`)

	if page := body(t, r.do("GET", "/tenants/production", nil, ""), 200); strings.Contains(page, "suspended") || strings.Contains(page, "<dt>Pending</dt>") {
		t.Error("a tenant that is not suspended shows a suspension")
	}
}
