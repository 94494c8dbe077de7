package backend

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// Notifications are the server's notifications (--notifications): the
// providers its config names, and test messages to them. cmd/rezuscloud
// implements it with the notify package's Notifier.
type Notifications interface {
	// Providers names the providers of the config.
	Providers() []string
	// Test sends a test message to the provider now, once, and returns
	// why it was not delivered. Its error holds none of the provider's
	// secrets: it reaches the client.
	Test(ctx context.Context, provider string) error
}

// noNotifications is the answer of the notification endpoints of a server
// without notifications.
const noNotifications = "no notifications are configured: the server was started without --notifications"

// notificationTestPath is where a test message is requested.
const notificationTestPath = "POST /api/v1/notifications/{provider}/test"

// ServeNotifications makes the notification endpoint of the API answer
// from n:
//
//	POST /api/v1/notifications/{provider}/test  (role edit): 204 once the provider took the test message
//
// The body is empty or {}. A provider the config does not name answers
// 404; a message the provider did not take answers 502 with why. Without
// a call of ServeNotifications (or with a nil n) it answers 501: no
// notifications are configured. Call it before Run.
func (s *Server) ServeNotifications(n Notifications) {
	if n == nil {
		s.notifications.Store(nil)
		return
	}
	s.notifications.Store(&notificationService{n: n})
}

// notificationService is what ServeNotifications was given.
type notificationService struct{ n Notifications }

// serveNotifications mounts the notification endpoint (see
// ServeNotifications).
func (s *Server) serveNotifications() {
	s.Handle(notificationTestPath, http.HandlerFunc(s.testNotification))
}

func (s *Server) testNotification(w http.ResponseWriter, r *http.Request) {
	id, ok := requireRole(w, r, RoleEdit, "sending a test notification")
	if !ok {
		return
	}
	ns := s.notifications.Load()
	if ns == nil {
		api.WriteError(w, api.Errorf(http.StatusNotImplemented, "%s", noNotifications))
		return
	}
	provider := r.PathValue("provider")
	if names := ns.n.Providers(); !slices.Contains(names, provider) {
		api.WriteError(w, api.Errorf(http.StatusNotFound, "no notification provider named %q; the server's notifications have %v", provider, names))
		return
	}
	if err := emptyObjectBody(w, r, "test notification request"); err != nil {
		api.WriteError(w, err)
		return
	}
	if err := ns.n.Test(r.Context(), provider); err != nil {
		s.Audit().Warn("test notification not delivered", append(id.Who(), "role", id.Role.String(), "what", "test notification", "provider", provider, "at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr, "err", err.Error())...)
		api.WriteError(w, api.Errorf(http.StatusBadGateway, "the test message was not delivered: %v", err))
		return
	}
	s.Audit().Info("test notification delivered", append(id.Who(), "role", id.Role.String(), "what", "test notification", "provider", provider, "at", time.Now().UTC().Format(time.RFC3339Nano), "remote", r.RemoteAddr)...)
	w.WriteHeader(http.StatusNoContent)
}
