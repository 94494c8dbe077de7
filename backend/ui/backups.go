package ui

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Bounds of the tenant page's list of backups.
const (
	// backupsShown is how many of the newest backups the page lists.
	backupsShown = 100
	// backupsWait bounds how long the page waits for the backup store's
	// listing.
	backupsWait = 5 * time.Second
)

// backupsView is the tenant page's list of the tenant's backups, metadata
// only, newest first.
type backupsView struct {
	// Store: the server has a backup store; without one there is no list.
	Store bool
	List  []schema.BackupInfo
	// More counts the older backups left out of List.
	More int
	// Problem says why the list could not be read.
	Problem string
	// Download is the base of the admins' download links
	// (Download/ID/download); "" for other users.
	Download string
}

// backups lists the tenant's backups for its page, when the page (or the
// part of it asked for) shows them: the listing reads the backup store.
func (h *handler) backups(r *http.Request, v *view, tenant string) backupsView {
	if parts := r.URL.Query().Get("part"); parts != "" && !slices.Contains(strings.Split(parts, ","), "backups") {
		return backupsView{}
	}
	b := h.srv.Backups()
	if b == nil {
		return backupsView{}
	}
	out := backupsView{Store: true}
	ctx, cancel := context.WithTimeout(r.Context(), backupsWait)
	defer cancel()
	list, err := b.ListBackups(ctx, tenant)
	if err != nil {
		h.log.Error("dashboard: list backups", "tenant", tenant, "err", err)
		out.Problem = "The backup store could not be listed; the server log has the details."
		return out
	}
	slices.Reverse(list)
	if len(list) > backupsShown {
		out.More = len(list) - backupsShown
		list = list[:backupsShown]
	}
	out.List = list
	if v.Admin {
		out.Download = "/api/v1/tenants/" + url.PathEscape(tenant) + "/backups"
	}
	return out
}
