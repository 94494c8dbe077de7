package reconciler

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/commitmsg"
	"github.com/rezuscloud/rezuscloud/reconciler/tofu"
	"github.com/rezuscloud/rezuscloud/schema"
)

func TestReplaceCheckNeedsTheTrailerForControlPlanes(t *testing.T) {
	td := &schema.TenantDesired{Tenant: &schema.Tenant{Metadata: schema.ObjectMeta{Name: "staging"}}}
	for name, role := range map[string]string{"cp": schema.RoleControlPlane, "workers": schema.RoleWorker} {
		td.NodeGroups = append(td.NodeGroups, &schema.NodeGroup{Metadata: schema.ObjectMeta{Name: name,
			Labels: map[string]string{schema.LabelTenant: "staging", schema.LabelRole: role}}})
	}
	gone := []tofu.PlannedChange{
		{Address: "rezussim_machine.ng_cp[0]", Actions: []string{"delete", "create"}},
		{Address: "rezussim_machine.ng_cp[1]", Actions: []string{"delete"}},
		{Address: "rezussim_machine.ng_workers[0]", Actions: []string{"delete", "create"}},
	}

	err := replaceCheck(td, nil)(gone)
	var re *ReplaceError
	var stalled *StalledError
	if !errors.As(err, &stalled) || stalled.Reason != schema.ReasonReplaceBlocked {
		t.Fatalf("without a trailer: %v is not a stall for %s", err, schema.ReasonReplaceBlocked)
	}
	if !errors.As(err, &re) || !slices.Equal(re.Addresses, []string{"rezussim_machine.ng_cp[0]"}) ||
		!strings.Contains(err.Error(), `"Rezuscloud-Allow-Replace: staging"`) {
		t.Fatalf("without a trailer: %v", err)
	}
	other := commitmsg.ParseTrailers("change\n\nRezuscloud-Allow-Replace: production\n")
	if err := replaceCheck(td, other)(gone); err == nil {
		t.Fatal("a trailer naming another tenant allowed the replacement")
	}
	for _, msg := range []string{
		"change\n\nRezuscloud-Allow-Replace: staging\n",
		"change\n\nrezuscloud-allow-replace: production, staging\n",
		"change\n\nRezuscloud-Allow-Replace: production\nRezuscloud-Allow-Replace: staging\n",
	} {
		if err := replaceCheck(td, commitmsg.ParseTrailers(msg))(gone); err != nil {
			t.Errorf("%q: %v", msg, err)
		}
	}
	// Only destroyed control planes and replaced workers: no trailer needed.
	if err := replaceCheck(td, nil)(gone[1:]); err != nil {
		t.Fatalf("destroys and worker replacements: %v", err)
	}
}
