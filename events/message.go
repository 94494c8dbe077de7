package events

import (
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/rezuscloud/rezuscloud/internal/redact"
	"github.com/rezuscloud/rezuscloud/notify"
)

// maxMessage bounds an event's message, in bytes.
const maxMessage = 2000

// message makes msg an event's message: on one line, without anything
// that looks like a secret (a tofu error may quote one), and bounded.
func message(msg string) string {
	msg = redact.Text(strings.Join(strings.Fields(msg), " "))
	if len(msg) <= maxMessage {
		return msg
	}
	cut := maxMessage - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// short is a revision as people read it: its first 12 characters.
func short(rev string) string {
	rev = strings.TrimPrefix(rev, "sha256:")
	return rev[:min(len(rev), 12)]
}

// link is the dashboard's page kind/name ("tenants", "commits") under the
// external URL; "" without one.
func (d *Deriver) link(kind, name string) string {
	if d.opts.ExternalURL == "" {
		return ""
	}
	return strings.TrimRight(d.opts.ExternalURL, "/") + "/" + kind + "/" + url.PathEscape(name)
}

// sortEvents orders events of one moment by tenant and machine, so that
// what is told at once is told in the same order every time.
func sortEvents(evs []notify.Event) {
	sort.SliceStable(evs, func(i, j int) bool {
		if evs[i].Tenant != evs[j].Tenant {
			return evs[i].Tenant < evs[j].Tenant
		}
		return evs[i].Machine < evs[j].Machine
	})
}
