package api

import "time"

// TokenInfo is one API token as GET /api/v1/tokens lists it: what it is
// and how it is used, never its secret or digest.
type TokenInfo struct {
	Name string `json:"name"`
	// Owner is the person or team the token is for, from the tokens
	// file's owner=; empty when it names none.
	Owner string `json:"owner,omitempty"`
	Role  string `json:"role"`
	// Source is "file" for a token of the tokens file and "ephemeral"
	// for one the server minted for its own runs.
	Source string `json:"source"`
	// ExpiresAt is when the token stops working; absent for never.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// Expired says that ExpiresAt has passed: the token is refused.
	Expired bool `json:"expired,omitempty"`
	// LastUsed is the token's last accepted use that any replica of
	// the store recorded (at a resolution of a minute), or that this
	// server saw; absent when none was.
	LastUsed *time.Time `json:"lastUsed,omitempty"`
}

// The sources of a TokenInfo.
const (
	TokenSourceFile      = "file"
	TokenSourceEphemeral = "ephemeral"
)
