package backend

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"

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

// LeaderHandler serves, on a replica, a path outside the API that only
// the leading replica serves (the push webhooks): the handler given to
// Set once this replica leads, and until then the leader, where Forward
// says it is. Mount it with HandleUnauthenticated: the handler it
// serves, or the leader, checks the request.
type LeaderHandler struct {
	s *Server
	h atomic.Pointer[http.Handler]
}

// LeaderHandler returns a LeaderHandler of s, with no handler of its own
// yet.
func (s *Server) LeaderHandler() *LeaderHandler { return &LeaderHandler{s: s} }

// Set makes l serve h from now on: this replica leads.
func (l *LeaderHandler) Set(h http.Handler) { l.h.Store(&h) }

func (l *LeaderHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := l.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	if l.s.api.forwarded(w, r) {
		return
	}
	api.WriteError(w, api.Errorf(http.StatusServiceUnavailable, "%s %s is served by the leading replica, and no replica leads now: send it again once one does", r.Method, r.URL.Path))
}
