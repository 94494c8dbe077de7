package backend

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/rezuscloud/rezuscloud/backend/api"
	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// DefaultHistoryWindow is how far back a history request reaches without
// since.
const DefaultHistoryWindow = 24 * time.Hour

// routeHistory mounts the history endpoints (role view, like the rest of
// the API):
//
//	GET /api/v1/tenants/{t}/machines/{id}/history?since=&until=&step=  schema.MachineHistory
//	GET /api/v1/tenants/{t}/history?since=&until=                      schema.TenantHistory
//
// since and until are RFC 3339 times or durations back from now ("24h");
// they default to the last 24 hours. step is a duration of at least a
// minute ("15m"); without it the samples come at the resolution stored.
// An unknown tenant, or a machine that neither exists in the tenant nor
// has history there, answers 404; a bad parameter 400.
func (a *resourceAPI) routeHistory() {
	a.router.GET("/api/v1/tenants/:tenant/machines/:name/history", a.machineHistory)
	a.router.GET("/api/v1/tenants/:tenant/history", a.tenantHistory)
}

func (a *resourceAPI) machineHistory(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	tenant, machine := p.ByName("tenant"), p.ByName("name")
	q, err := parseHistoryQuery(r.URL.Query(), time.Now(), true)
	if err != nil {
		api.WriteError(w, err)
		return
	}
	var h schema.MachineHistory
	err = a.store.View(func(tx store.Tx) error {
		if err := needTenant(tx, tenant); err != nil {
			return err
		}
		exists, err := machineOf(tx, tenant, machine)
		if err != nil {
			return err
		}
		h, err = history.Machine(tx, tenant, machine, q)
		if errors.Is(err, store.ErrNotFound) && exists {
			return nil
		}
		if errors.Is(err, store.ErrNotFound) {
			return api.Errorf(http.StatusNotFound, "machine %q not found in tenant %q", machine, tenant)
		}
		return err
	})
	a.writeResult(w, r, h, err)
}

// machineOf reports whether the machine named name belongs to tenant.
func machineOf(tx store.Tx, tenant, name string) (bool, error) {
	m, err := tx.Get(schema.KindMachine, name)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var head store.MetaHead
	if err := m.DecodeMeta(&head); err != nil {
		return false, err
	}
	meta := head.Meta()
	return schema.TenantOf(schema.KindMachine, &meta) == tenant, nil
}

func (a *resourceAPI) tenantHistory(w http.ResponseWriter, r *http.Request, p httprouter.Params) {
	tenant := p.ByName("tenant")
	q, err := parseHistoryQuery(r.URL.Query(), time.Now(), false)
	if err != nil {
		api.WriteError(w, err)
		return
	}
	var h schema.TenantHistory
	err = a.store.View(func(tx store.Tx) error {
		if err := needTenant(tx, tenant); err != nil {
			return err
		}
		h, err = history.Tenant(tx, tenant, q)
		return err
	})
	a.writeResult(w, r, h, err)
}

// parseHistoryQuery reads since, until and, when withStep, step, as of
// now.
func parseHistoryQuery(v url.Values, now time.Time, withStep bool) (history.Query, error) {
	q := history.Query{Since: now.Add(-DefaultHistoryWindow), Until: now}
	var err error
	if s := v.Get("since"); s != "" {
		if q.Since, err = historyTime("since", s, now); err != nil {
			return q, err
		}
	}
	if s := v.Get("until"); s != "" {
		if q.Until, err = historyTime("until", s, now); err != nil {
			return q, err
		}
	}
	if !q.Since.Before(q.Until) {
		return q, api.Errorf(http.StatusBadRequest, "since %s is not before until %s", q.Since.Format(time.RFC3339), q.Until.Format(time.RFC3339))
	}
	if s := v.Get("step"); s != "" && withStep {
		d, err := time.ParseDuration(s)
		if err != nil || d < time.Minute {
			return q, api.Errorf(http.StatusBadRequest, "step %q: want a duration of at least a minute, such as 5m or 1h", s)
		}
		q.Step = d
	} else if s != "" {
		return q, api.Errorf(http.StatusBadRequest, "step: a tenant's history has no samples; step applies to a machine's")
	}
	return q, nil
}

// historyTime reads param's value s: an RFC 3339 time, or a duration back
// from now.
func historyTime(param, s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && !strings.HasPrefix(s, "-") {
		return time.Unix(n, 0).UTC(), nil
	}
	return time.Time{}, api.Errorf(http.StatusBadRequest,
		"%s %q: want an RFC 3339 time (2026-01-02T15:04:05Z), a duration back from now (24h) or Unix seconds", param, s)
}
