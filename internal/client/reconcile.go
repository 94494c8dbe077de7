package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// ReconcilePath is where reconciles are requested.
const ReconcilePath = "/api/v1/reconcile"

// Reconcile asks the server to fetch its source now and to run the pending
// retry of tenant (of every tenant when "") now (role edit). It returns
// what the server set in motion; it does not wait for the runs.
func (c *Client) Reconcile(ctx context.Context, tenant string) (*api.ReconcileResponse, error) {
	var body []byte
	if tenant != "" {
		body = mustMarshal(api.ReconcileRequest{Tenant: tenant})
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	b, err := c.post(ctx, ReconcilePath, body, http.StatusAccepted)
	if err != nil {
		return nil, err
	}
	var res api.ReconcileResponse
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("POST %s: decode answer: %w", ReconcilePath, err)
	}
	return &res, nil
}

// post sends body (JSON, or nothing when nil) to path and returns the
// answer when its status is want (any 2xx when want is 0); any other status comes back as a
// *StatusError, no answer at all as a *ConnError.
func (c *Client) post(ctx context.Context, path string, body []byte, want int) ([]byte, error) {
	target := c.url(path, nil)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("User-Agent", c.agent)
	if err := c.authorize(ctx, hr); err != nil {
		return nil, err
	}
	start := time.Now()
	resp, err := c.http.Do(hr)
	if err != nil {
		if c.trace != nil {
			c.trace(http.MethodPost, target, 0, time.Since(start))
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ConnError{Server: c.Server(), Err: err}
	}
	defer resp.Body.Close()
	if c.trace != nil {
		c.trace(http.MethodPost, target, resp.StatusCode, time.Since(start))
	}
	if ok := resp.StatusCode/100 == 2; (want == 0 && !ok) || (want != 0 && resp.StatusCode != want) {
		return nil, statusError(resp, path)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, &ConnError{Server: c.Server(), Err: err}
	}
	return b, nil
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encode %T: %v", v, err))
	}
	return b
}
