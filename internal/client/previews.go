package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

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
	b, err := c.post(ctx, PreviewsPath, body, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var res preview.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("POST %s: decode answer: %w", PreviewsPath, err)
	}
	return &res, nil
}
