// Package preview holds the wire shapes of a preview: what `rezusctl diff
// --plan` uploads to POST /api/v1/previews and what the server answers,
// which is also what a pull request's plan preview records. It holds no
// logic and imports only the shapes it is made of (schema, modeldiff).
package preview

import (
	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/schema"
)

// MaxUploadBytes bounds the body of POST /api/v1/previews.
const MaxUploadBytes = 8 << 20

// Request is a tree of manifests to preview against what the server has
// applied.
type Request struct {
	// Files maps slash-separated paths to their contents.
	Files map[string]string `json:"files"`
	// Root is the path inside Files that holds the manifests; "." when
	// empty.
	Root string `json:"root,omitempty"`
	// Plan asks for a real `tofu plan` of every tenant that changes.
	Plan bool `json:"plan,omitempty"`
	// Rendered asks for the applied and the proposed main.tf.json of every
	// tenant that changes, with secrets redacted.
	Rendered bool `json:"rendered,omitempty"`
}

// Result is the answer to a preview.
type Result struct {
	// Valid is false when the tree has problems; nothing was planned then.
	Valid    bool             `json:"valid"`
	Problems []schema.Problem `json:"problems,omitempty"`
	Tenants  []Tenant         `json:"tenants"`
}

// Tenant is what a preview would do to one tenant.
type Tenant struct {
	Tenant string `json:"tenant"`
	// Changes are the objects created, changed or deleted, field by field.
	Changes []modeldiff.ObjectChange `json:"changes,omitempty"`
	// Plan and Resources are tofu's plan, when one was asked for.
	Plan      *schema.PlanSummary `json:"plan,omitempty"`
	Resources []ResourceChange    `json:"resources,omitempty"`
	// Rendered holds the workspaces, when asked for.
	Rendered *Rendered `json:"rendered,omitempty"`
	// Error says why the plan failed.
	Error string `json:"error,omitempty"`
}

// ResourceChange is one resource of a plan and what tofu would do to it.
type ResourceChange struct {
	Address string   `json:"address"`
	Actions []string `json:"actions"`
}

// Rendered is a tenant's main.tf.json as applied and as proposed.
type Rendered struct {
	Applied  string `json:"applied"`
	Proposed string `json:"proposed"`
}
