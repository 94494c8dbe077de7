package backend

import (
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// Forward says where to send an API request that this server has no
// route for: on a replica that does not lead, the leader's base URL,
// which alone serves what its reconciler answers (kubeconfigs, machine
// logs, previews, reconcile requests, backups). ok is false where the
// request is this server's to answer, with a 404 or a 405.
type Forward func() (leader *url.URL, ok bool)

// forwardedHeader marks a request one server sent to another, which
// never sends it on: two replicas that each take the other for the
// leader answer instead of sending a request back and forth.
const forwardedHeader = "X-Rezuscloud-Forwarded"

// SetForward makes the API send the requests it has no route for where f
// says; nil answers them here. May be called while the server runs.
func (s *Server) SetForward(f Forward) {
	if f == nil {
		s.api.forward.Store(nil)
		return
	}
	s.api.forward.Store(&f)
}

// forwarded sends r on where the Forward says, and reports whether it did.
// The caller's credentials go with it: the leader checks them again.
func (a *resourceAPI) forwarded(w http.ResponseWriter, r *http.Request) bool {
	f := a.forward.Load()
	if f == nil || r.Header.Get(forwardedHeader) != "" {
		return false
	}
	target, ok := (*f)()
	if !ok {
		return false
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Header.Set(forwardedHeader, "1")
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			a.log.Warn("forward to the leader", "leader", target.String(), "path", r.URL.Path, "err", err)
			api.WriteError(w, api.Errorf(http.StatusBadGateway, "%s %s is served by the leader at %s, which does not answer", r.Method, r.URL.Path, target))
		},
	}
	p.ServeHTTP(w, r)
	return true
}
