package backend

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/store"
)

// lockView is the API view of the lock l: stale when older than staleAge
// at now (never when staleAge is 0).
func lockView(l *store.Lock, staleAge time.Duration, now time.Time) *api.StateLock {
	li := l.Holder()
	return &api.StateLock{
		ID:        l.ID,
		Token:     l.Token,
		Who:       li.Who,
		Operation: li.Operation,
		Created:   l.Created,
		Stale:     staleAge > 0 && now.Sub(l.Created) > staleAge,
	}
}

// holderInfo returns the LockInfo JSON sent back with 423: the client's own
// LockInfo with the token's name added to Who, so that tofu, which prints
// Who, tells its user which token holds the lock.
func holderInfo(l *store.Lock) []byte {
	var m map[string]any
	if err := json.Unmarshal(l.Info, &m); err != nil || m == nil {
		m = map[string]any{"ID": l.ID}
	}
	who, _ := m["Who"].(string)
	if who == "" {
		m["Who"] = "token " + l.Token
	} else {
		m["Who"] = fmt.Sprintf("%s (token %s)", who, l.Token)
	}
	if _, ok := m["Created"]; !ok {
		m["Created"] = l.Created
	}
	b, _ := json.Marshal(m)
	return b
}
