package backend

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/store"
)

// TokensPath lists the API tokens (GET, role admin).
const TokensPath = APIPrefix + "tokens"

// serveTokens mounts GET /api/v1/tokens: the tokens of the tokens file
// and the ephemeral ones of this server, with their owner, role, expiry
// and last use; never a secret or a digest.
func (s *Server) serveTokens() {
	s.Handle("GET "+TokensPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := requireRole(w, r, RoleAdmin, "listing tokens"); !ok {
			return
		}
		var items []api.TokenInfo
		err := s.store.View(func(tx store.Tx) error {
			items = s.tokens.list(tx)
			return nil
		})
		if err != nil {
			api.WriteError(w, api.Errorf(http.StatusInternalServerError, "list tokens: %v", err))
			return
		}
		api.WriteJSON(w, http.StatusOK, api.NewList(items))
	}))
}

// list returns the tokens of the file, in the file's order, then the
// ephemeral ones by name. Last uses come from tx (what every replica
// recorded) and from this process's memory, whichever is later.
func (t *Tokens) list(tx store.Tx) []api.TokenInfo {
	now := t.clock()
	t.mu.RLock()
	file := slices.Clone(t.file)
	type eph struct {
		e    tokenEntry
		last int64
	}
	var ephemeral []eph
	for e, use := range t.ephemeral {
		ephemeral = append(ephemeral, eph{*e, use.Load()})
	}
	t.mu.RUnlock()
	items := make([]api.TokenInfo, 0, len(file)+len(ephemeral))
	for _, e := range file {
		last := storedLastUsed(tx, e.name)
		if seen := t.used.seen(e.name); seen.After(last) {
			last = seen
		}
		items = append(items, e.info(api.TokenSourceFile, last, now))
	}
	slices.SortFunc(ephemeral, func(a, b eph) int { return strings.Compare(a.e.name, b.e.name) })
	for _, x := range ephemeral {
		var last time.Time
		if x.last != 0 {
			last = time.Unix(0, x.last)
		}
		items = append(items, x.e.info(api.TokenSourceEphemeral, last, now))
	}
	return items
}

// info describes e as the token list shows it.
func (e tokenEntry) info(source string, last, now time.Time) api.TokenInfo {
	ti := api.TokenInfo{Name: e.name, Owner: e.owner, Role: e.role.String(), Source: source}
	if !e.expires.IsZero() {
		at := e.expires.UTC()
		ti.ExpiresAt = &at
		ti.Expired = !now.Before(at)
	}
	if !last.IsZero() {
		l := last.UTC()
		ti.LastUsed = &l
	}
	return ti
}
