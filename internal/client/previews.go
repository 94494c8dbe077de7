package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/preview"
)

// PreviewsPath is where previews are asked for.
const PreviewsPath = "/api/v1/previews"

// RenderedPath is a tenant's applied workspace, redacted.
func RenderedPath(tenant string) string { return TenantPath(tenant) + "/rendered" }

// Preview uploads a tree of manifests and returns what the server says it
// would do (role edit). Plans can take a while: only ctx bounds the wait.
func (c *Client) Preview(ctx context.Context, req preview.Request) (*preview.Result, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	target := c.url(PreviewsPath, nil)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", PreviewsPath, err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("User-Agent", c.agent)
	if c.token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.token)
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
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(resp, PreviewsPath)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, &ConnError{Server: c.Server(), Err: err}
	}
	var res preview.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("POST %s: decode answer: %w", PreviewsPath, err)
	}
	return &res, nil
}
