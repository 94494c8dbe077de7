package reconciler

import (
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
	"github.com/rezuscloud/rezuscloud/store/storetest"
)

// TestCompactHistory: the plane's batches of gauges are stored in one
// transaction, a retention pass downsamples what is older than the full
// resolution's window, and it forgets the history of a tenant that is no
// longer stored.
func TestCompactHistory(t *testing.T) {
	st, err := bolt.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Update(func(tx store.Tx) error {
		_, err := tx.PutObject(schema.KindTenant, "alpha", storetest.Tenant("alpha", "prod", 1))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	keep := HistorySamples(st, nil, nil)
	for i := range 3 * 60 {
		at := now.Add(-48*time.Hour + time.Duration(i)*time.Minute)
		keep(map[string]map[string]schema.MachineSample{
			"alpha": {"alpha-cp-0": {At: at, Load1: 1}},
			"gone":  {"gone-cp-0": {At: at, Load1: 2}},
		})
	}
	if err := CompactHistory(st, now, history.Options{}); err != nil {
		t.Fatal(err)
	}
	err = st.View(func(tx store.Tx) error {
		h, err := history.Machine(tx, "alpha", "alpha-cp-0", history.Query{Since: now.Add(-72 * time.Hour)})
		if err != nil {
			return err
		}
		if len(h.Samples) != 3 || h.Step != 3600 || h.Samples[0].Load1 != 1 {
			t.Errorf("alpha's samples after a pass: step %d, %+v; want 3 hourly", h.Step, h.Samples)
		}
		tenants, err := history.Tenants(tx)
		if len(tenants) != 1 || tenants[0] != "alpha" {
			t.Errorf("tenants with history after a pass: %v, want alpha only", tenants)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
