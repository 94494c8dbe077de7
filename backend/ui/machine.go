package ui

import (
	"cmp"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// logTailLines is how many lines of a machine's log the page asks for
// before it follows.
const logTailLines = 100

type machinePage struct {
	M      schema.Machine
	Tenant string
	Labels [][2]string
	// Config links the machine's Talos config, for admins of a server
	// that serves it; Logs is the log stream, for the edit role, once the
	// server has one.
	Config, Logs string
	// LogsNeedEdit: the server serves the log, but not to this user.
	LogsNeedEdit bool
	// The machine's last day, drawn.
	machinePictures
}

func (h *handler) machine(r *http.Request, v *view) (string, error) {
	tenant, name := r.PathValue("tenant"), r.PathValue("machine")
	p := machinePage{Tenant: tenant}
	sp := span{Since: v.Now.Add(-pictureWindow), Until: v.Now}
	err := h.srv.Store().View(func(tx store.Tx) error {
		v.RV = tx.ResourceVersion()
		err := tx.GetObject(schema.KindMachine, name, &p.M)
		if errors.Is(err, store.ErrNotFound) || (err == nil && schema.TenantOf(schema.KindMachine, &p.M.Metadata) != tenant) {
			return notFound("There is no machine %q in tenant %q.", name, tenant)
		}
		if err != nil {
			return err
		}
		hist, err := machineHistory(tx, tenant, name, sp)
		if err != nil {
			h.log.Error("dashboard: machine history", "tenant", tenant, "machine", name, "err", err)
			p.HistoryProblem = "The machine's history could not be read; the server log has the details."
			return nil
		}
		p.machinePictures = drawMachine(hist, cmp.Or(p.M.Spec.Hostname, name), sp)
		return nil
	})
	if err != nil {
		return "", err
	}
	for k, val := range p.M.Metadata.Labels {
		p.Labels = append(p.Labels, [2]string{k, val})
	}
	slices.SortFunc(p.Labels, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	base := "/api/v1/tenants/" + url.PathEscape(tenant) + "/machines/" + url.PathEscape(name)
	if v.Admin && h.srv.Routes(http.MethodGet, base+"/config") {
		p.Config = base + "/config"
	}
	if h.srv.Routes(http.MethodGet, base+"/logs") {
		if v.Edit {
			p.Logs = base + "/logs?follow=true&tailLines=" + itoa(logTailLines)
		} else {
			p.LogsNeedEdit = true
		}
	}
	v.Title, v.Nav, v.Body = "Machine "+name, "overview", p
	v.Watch = []string{"/api/v1/tenants/" + url.PathEscape(tenant) + "/machines?watch=true"}
	return "machine", nil
}
