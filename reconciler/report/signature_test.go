package report

import (
	"testing"

	"github.com/rezuscloud/rezuscloud/schema"
)

// TestStatusesForUnverifiedPreview: a preview whose signature would not
// pass says so first in its commit status; a verified one, and a commit
// of the main ref, do not.
func TestStatusesForUnverifiedPreview(t *testing.T) {
	ok := schema.TenantResult{Tenant: "prod", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 1}}
	for _, c := range []struct {
		name    string
		preview bool
		sig     *schema.CommitSignature
		want    string
	}{
		{"unsigned preview", true, &schema.CommitSignature{Reason: "the commit is not signed"}, "unsigned; would add 1, change 0, destroy 0 in 1 tenant"},
		{"untrusted preview", true, &schema.CommitSignature{Type: "ssh", Key: "SHA256:x", Reason: "not allowed"}, "signature not trusted; would add 1, change 0, destroy 0 in 1 tenant"},
		{"verified preview", true, &schema.CommitSignature{Type: "gpg", Verified: true}, "would add 1, change 0, destroy 0 in 1 tenant"},
		{"unchecked preview", true, nil, "would add 1, change 0, destroy 0 in 1 tenant"},
	} {
		commit := commitAt(schema.CommitSucceeded, c.preview, ok)
		commit.Status.Signature = c.sig
		if got := StatusesFor("eu", commit, "")[0].Description; got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
