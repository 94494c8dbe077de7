package report

// DriftContext is the context of a tenant's drift checks:
// "rezuscloud/<instance>/<tenant>/drift". It is a context of its own, not
// the tenant's: the tenant's status says how applying the commit went,
// which drift found later does not change, and a forge keeps one state per
// context, so that drift on the tenant's own context would overwrite the
// apply's outcome, and its clearing would look like a new apply.
func DriftContext(instance, tenant string) string {
	return TenantContext(instance, tenant) + "/drift"
}

// DriftStatus is the status of a tenant's drift check on the commit sha
// applied to it: failure while the infrastructure drifted (a check that
// fails a required status shows up where people look at the commit),
// success once a check finds it as applied again. message is the
// tenant's Drifted condition message, which names resources and
// attributes but never values.
func DriftStatus(instance, tenant, sha string, drifted bool, message, targetURL string) Status {
	st := Status{SHA: sha, Context: DriftContext(instance, tenant), State: StateSuccess,
		Description: "no drift: the infrastructure is as this commit applied it", TargetURL: targetURL}
	if drifted {
		st.State, st.Description = StateFailure, truncate(message, MaxDescription)
	}
	return st
}
