package reconciler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// DefaultHistoryInterval is how often RunHistoryRetention applies the
// history's retention.
const DefaultHistoryInterval = 10 * time.Minute

// historyBatch is how many tenants one transaction of a retention pass
// compacts: enough to spare the commits, few enough to keep each short.
const historyBatch = 64

// HistoryOptions configure the keeping of the history of machines and
// tenants (package history) beside the loop.
type HistoryOptions struct {
	// Retention is how long history is kept at which resolution.
	Retention history.Options
	// Interval is how often the retention is applied. Default
	// DefaultHistoryInterval.
	Interval time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger gets a pass's failures; default slog.Default().
	Logger *slog.Logger
}

// RunHistoryRetention applies o's retention to the history in st at once
// and then every o.Interval, until ctx ends: CompactHistory. A failed pass
// is logged and the next one tries again.
func RunHistoryRetention(ctx context.Context, st store.Store, o HistoryOptions) {
	if o.Interval <= 0 {
		o.Interval = DefaultHistoryInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		if err := CompactHistory(st, o.Now(), o.Retention); err != nil {
			o.Logger.Error("apply the history's retention", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// CompactHistory applies the retention r as of now to the history of
// every tenant that has one, and forgets the history of a tenant no
// longer stored (removed from git).
func CompactHistory(st store.Store, now time.Time, r history.Options) error {
	var tenants []string
	if err := st.View(func(tx store.Tx) (err error) {
		tenants, err = history.Tenants(tx)
		return err
	}); err != nil {
		return err
	}
	for len(tenants) > 0 {
		batch := tenants[:min(historyBatch, len(tenants))]
		tenants = tenants[len(batch):]
		err := st.Update(func(tx store.Tx) error {
			for _, t := range batch {
				if err := compactTenantHistory(tx, t, now, r); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func compactTenantHistory(tx store.Tx, tenant string, now time.Time, r history.Options) error {
	_, err := tx.Get(schema.KindTenant, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return history.Forget(tx, tenant)
	}
	if err != nil {
		return err
	}
	return history.Compact(tx, tenant, now, r)
}

// HistorySamples returns the function that stores a batch of machines'
// gauges (tenant → machine → sample) in st, in one transaction: the Talos
// plane's OnSamples. A sample without its time is taken at now(); a batch
// that fails to store is logged and dropped.
func HistorySamples(st store.Store, now func() time.Time, log *slog.Logger) func(map[string]map[string]schema.MachineSample) {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return func(batch map[string]map[string]schema.MachineSample) {
		if len(batch) == 0 {
			return
		}
		err := st.Update(func(tx store.Tx) error {
			for tenant, samples := range batch {
				if err := history.RecordSamples(tx, tenant, sampledAt(samples, now), samples); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			log.Error("store the machines' gauges", "tenants", len(batch), "err", err)
		}
	}
}

// sampledAt is the latest time of samples, else now().
func sampledAt(samples map[string]schema.MachineSample, now func() time.Time) time.Time {
	var at time.Time
	for _, s := range samples {
		if s.At.After(at) {
			at = s.At
		}
	}
	if at.IsZero() {
		return now()
	}
	return at
}
