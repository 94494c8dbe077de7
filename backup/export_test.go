package backup

import (
	"testing"
	"time"
)

// SetNow moves Prune's clock by d for the rest of the test.
func SetNow(t testing.TB, d time.Duration) {
	now = func() time.Time { return time.Now().Add(d) }
	t.Cleanup(func() { now = time.Now })
}
