package client

import (
	"context"

	"github.com/rezuscloud/rezuscloud/backend/api"
)

// TokensPath lists the API tokens.
const TokensPath = "/api/v1/tokens"

// ListTokens lists the server's API tokens (role admin): name, owner,
// role, source, expiry and last use, never a secret.
func (c *Client) ListTokens(ctx context.Context) ([]api.TokenInfo, error) {
	var l api.List[api.TokenInfo]
	if err := c.Get(ctx, TokensPath, &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}
