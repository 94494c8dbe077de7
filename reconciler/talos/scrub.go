package talos

// setScrub keeps the tenant's scrub (Desired.Scrub) for the calls to its
// machines; nil forgets it.
func (pl *Plane) setScrub(tenant string, scrub func(string) string) {
	if scrub == nil {
		pl.scrubs.Delete(tenant)
		return
	}
	pl.scrubs.Store(tenant, scrub)
}

// scrubbed is err, a machine's answer to a call for tenant, with the
// tenant's secrets taken out of its text by the tenant's scrub. The
// error it wraps still answers errors.Is and As, and so gRPC's status.
func (pl *Plane) scrubbed(tenant string, err error) error {
	if err == nil {
		return nil
	}
	v, ok := pl.scrubs.Load(tenant)
	if !ok {
		return err
	}
	msg := v.(func(string) string)(err.Error())
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

// scrubbedError is an error whose text had secrets taken out.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
