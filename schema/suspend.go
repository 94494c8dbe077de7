package schema

import "time"

// AnnotationSuspend on a Tenant pauses everything the server does to it
// while its value is "true": no apply, no destroy, no drift correction, no
// Talos bootstrap or rollout. Commits are still validated, and what they
// would change is recorded in the tenant's status.pending. "false", or no
// annotation, lets the tenant run again; any other value is an error.
const AnnotationSuspend = "rezuscloud.io/suspend"

// Suspended reports whether a Tenant's annotations suspend it.
func Suspended(annotations map[string]string) bool {
	return annotations[AnnotationSuspend] == "true"
}

// PendingChanges is what waits while a tenant is suspended: the newest
// revision whose changes were held back, and what they would change.
type PendingChanges struct {
	// Revision is the newest revision of the main ref held back.
	Revision string `json:"revision"`
	// Summary says in a line what the revision would change, from the
	// diff of its manifests against the ones last applied ("node group
	// workers scaled 2 → 4"); "no changes" when it changes nothing.
	Summary string `json:"summary"`
	// Deletion says that the tenant left git: its removal waits until it
	// is unsuspended.
	Deletion bool `json:"deletion,omitempty"`
	// Since is when the tenant was first held back.
	Since time.Time `json:"since"`
}

// checkSuspend checks a Tenant's suspend annotation: "true" or "false".
func checkSuspend(d *document, obj map[string]any) []Problem {
	v, ok := lookup(obj, JSONPointer("metadata", "annotations", AnnotationSuspend)).(string)
	if !ok || v == "true" || v == "false" {
		return nil
	}
	return []Problem{d.problem(JSONPointer("metadata", "annotations", AnnotationSuspend),
		"%s is %q; it must be \"true\" (suspend the tenant) or \"false\"", AnnotationSuspend, v)}
}
