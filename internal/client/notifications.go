package client

import (
	"context"
	"net/http"
)

// NotificationTestPath requests a test message to one provider of the
// server's notifications (POST).
func NotificationTestPath(provider string) string {
	return "/api/v1/notifications/" + esc(provider) + "/test"
}

// TestNotification asks the server to send a test message to the
// provider of its notifications (--notifications) named provider, now
// (role edit). It returns nil once the provider took it; otherwise a
// *StatusError: 404 for a provider the server does not have, 501 for a
// server without notifications, 502 with the provider's answer for a
// message it did not take.
func (c *Client) TestNotification(ctx context.Context, provider string) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	_, err := c.post(ctx, NotificationTestPath(provider), nil, http.StatusNoContent)
	return err
}
