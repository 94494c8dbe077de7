package schema

// AnnotationDriftPolicy on a Tenant says what the reconciler does when the
// tenant's real infrastructure drifts from what was applied:
// DriftPolicyDetect (the default) reports it, DriftPolicyCorrect also
// applies the last applied revision again.
const AnnotationDriftPolicy = "rezuscloud.io/drift-policy"

// Drift policies (AnnotationDriftPolicy).
const (
	DriftPolicyDetect  = "detect"
	DriftPolicyCorrect = "correct"
)

// DriftPolicy returns the drift policy a tenant's annotations declare;
// absent is DriftPolicyDetect. Validation refuses any other value.
func DriftPolicy(annotations map[string]string) string {
	if annotations[AnnotationDriftPolicy] == DriftPolicyCorrect {
		return DriftPolicyCorrect
	}
	return DriftPolicyDetect
}

// checkDriftPolicy checks a Tenant's drift-policy annotation.
func checkDriftPolicy(d *document, obj map[string]any) []Problem {
	const path = "/metadata/annotations/rezuscloud.io~1drift-policy"
	v, ok := lookup(obj, path).(string)
	if !ok || v == DriftPolicyDetect || v == DriftPolicyCorrect {
		return nil
	}
	return []Problem{d.problem(path, "must be %q or %q, not %q", DriftPolicyDetect, DriftPolicyCorrect, v)}
}
