package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
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
	// backupsKeep is how long a listing is reused while the tenant's
	// status.backup stays the same; maxBackupLists how many tenants'
	// listings are kept.
	backupsKeep    = time.Minute
	maxBackupLists = 1024
)

// backupLists keeps the listings of tenants' backups, so that the live
// page, which fetches its parts again whenever the tenant changes, does
// not list the backup store each time: a listing stays good while the
// tenant's status.backup (its last backup, count and last attempt) is the
// same, which a new backup or a pruned one moves.
type backupLists struct {
	mu sync.Mutex
	m  map[string]backupList
}

type backupList struct {
	key  string
	at   time.Time
	list []schema.BackupInfo
}

// listKey is what of a status.backup a listing depends on.
func listKey(st *schema.BackupStatus) string {
	if st == nil {
		return ""
	}
	return fmt.Sprintf("%s/%d/%d/%d", st.LastID, st.Count, st.LastSuccess.UnixNano(), st.LastAttempt.UnixNano())
}

func (c *backupLists) get(tenant string, st *schema.BackupStatus, now time.Time) ([]schema.BackupInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.m[tenant]
	if !ok || l.key != listKey(st) || now.Sub(l.at) >= backupsKeep || now.Before(l.at) {
		return nil, false
	}
	return l.list, true
}

func (c *backupLists) put(tenant string, st *schema.BackupStatus, list []schema.BackupInfo, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxBackupLists {
		c.m = map[string]backupList{}
	}
	c.m[tenant] = backupList{key: listKey(st), at: now, list: list}
}

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
// part of it asked for) shows them: the listing reads the backup store,
// so a listing is kept while the tenant's status.backup stays the same,
// for at most backupsKeep.
func (h *handler) backups(r *http.Request, v *view, t *schema.Tenant) backupsView {
	if parts := r.URL.Query().Get("part"); parts != "" && !slices.Contains(strings.Split(parts, ","), "backups") {
		return backupsView{}
	}
	b := h.srv.Backups()
	if b == nil {
		return backupsView{}
	}
	tenant := t.Metadata.Name
	out := backupsView{Store: true}
	list, ok := h.backupLists.get(tenant, t.Status.Backup, h.opts.Now())
	if !ok {
		ctx, cancel := context.WithTimeout(r.Context(), backupsWait)
		defer cancel()
		var err error
		if list, err = b.ListBackups(ctx, tenant); err != nil {
			h.log.Error("dashboard: list backups", "tenant", tenant, "err", err)
			out.Problem = "The backup store could not be listed; the server log has the details."
			return out
		}
		h.backupLists.put(tenant, t.Status.Backup, list, h.opts.Now())
	}
	list = slices.Clone(list)
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
