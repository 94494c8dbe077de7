package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// MachineHistoryPath is a machine's history in its tenant.
func MachineHistoryPath(tenant, id string) string { return MachinePath(tenant, id) + "/history" }

// TenantHistoryPath is a tenant's history.
func TenantHistoryPath(tenant string) string { return TenantPath(tenant) + "/history" }

// HistoryOptions selects a window of history. Zero fields take the
// server's defaults: the last 24 hours, the samples at the resolution it
// stores.
type HistoryOptions struct {
	Since, Until time.Time
	// Step resamples a machine's samples (at least a minute); a tenant's
	// history has none and ignores it.
	Step time.Duration
}

// values are o as the API's query parameters, step only when withStep.
func (o HistoryOptions) values(withStep bool) url.Values {
	q := url.Values{}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	if !o.Until.IsZero() {
		q.Set("until", o.Until.UTC().Format(time.RFC3339Nano))
	}
	if o.Step > 0 && withStep {
		q.Set("step", o.Step.String())
	}
	return q
}

// MachineHistory returns a machine's transitions and samples within opts
// (role view).
func (c *Client) MachineHistory(ctx context.Context, tenant, id string, opts HistoryOptions) (*schema.MachineHistory, error) {
	var h schema.MachineHistory
	return &h, c.getHistory(ctx, MachineHistoryPath(tenant, id), opts.values(true), &h)
}

// TenantHistory returns a tenant's availability, its machines' timelines
// and its marks within opts (role view).
func (c *Client) TenantHistory(ctx context.Context, tenant string, opts HistoryOptions) (*schema.TenantHistory, error) {
	var h schema.TenantHistory
	return &h, c.getHistory(ctx, TenantHistoryPath(tenant), opts.values(false), &h)
}

func (c *Client) getHistory(ctx context.Context, path string, q url.Values, out any) error {
	body, err := c.getBody(ctx, path, q, "application/json")
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: decode answer: %w", path, err)
	}
	return nil
}
