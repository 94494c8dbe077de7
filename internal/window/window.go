// Package window is the one home of maintenance windows' logic: a window
// opens at each time a cron schedule names, in a time zone, and stays open
// for a duration. It answers whether a set of windows is open at an
// instant, when the next one opens and when the open one closes, and says
// what waits for the next opening (WaitError), for the reconciler's steps
// and the Talos plane alike. Package schema parses and checks a tenant's
// windows with it. It knows nothing of tenants, machines or runs, and
// reads no clock of its own.
package window

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// maxChain bounds how many back-to-back or overlapping openings CloseAt
// follows: windows that never close (a schedule every minute with an hour
// of duration) end their answer there.
const maxChain = 10000

// Window is one parsed maintenance window.
type Window struct {
	sched    cron.Schedule
	duration time.Duration
	loc      *time.Location
}

// parser reads the standard five cron fields (minute, hour, day of month,
// month, day of week) and the @daily-style descriptors.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse reads a window: schedule, a five-field cron expression; duration,
// a Go duration above zero; zone, an IANA time zone name ("" and "UTC"
// mean UTC). Each error names the field that is wrong.
func Parse(schedule, duration, zone string) (Window, error) {
	var w Window
	var err error
	if w.sched, err = ParseSchedule(schedule); err != nil {
		return w, err
	}
	if w.duration, err = ParseDuration(duration); err != nil {
		return w, err
	}
	if w.loc, err = ParseZone(zone); err != nil {
		return w, err
	}
	return w, nil
}

// ParseSchedule reads a five-field cron expression. A time zone prefix
// (CRON_TZ=, TZ=) is refused: the zone is a field of its own.
func ParseSchedule(s string) (cron.Schedule, error) {
	if strings.HasPrefix(s, "CRON_TZ=") || strings.HasPrefix(s, "TZ=") {
		return nil, fmt.Errorf("schedule %q: give the time zone in timeZone, not in the schedule", s)
	}
	sched, err := parser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("schedule %q is not a cron expression of five fields (minute hour day-of-month month day-of-week): %v", s, err)
	}
	return sched, nil
}

// ParseDuration reads a Go duration ("4h", "90m") that must be above zero.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q is not a Go duration such as \"4h\" or \"90m\"", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("duration %q must be above zero", s)
	}
	return d, nil
}

// ParseZone reads an IANA time zone name ("Europe/Berlin"); "" is UTC.
// "Local" is refused: a window must not move with the server's zone.
func ParseZone(s string) (*time.Location, error) {
	if s == "" {
		return time.UTC, nil
	}
	if s == "Local" {
		return nil, errors.New(`time zone "Local" is not allowed: name an IANA zone such as "Europe/Berlin" or "UTC"`)
	}
	loc, err := time.LoadLocation(s)
	if err != nil {
		return nil, fmt.Errorf("time zone %q is not a known IANA zone name such as \"Europe/Berlin\" or \"UTC\"", s)
	}
	return loc, nil
}

// Duration is how long the window stays open after each opening.
func (w Window) Duration() time.Duration { return w.duration }

// next is the first opening after t.
func (w Window) next(t time.Time) time.Time {
	return w.sched.Next(t.In(w.loc))
}

// openedAt returns the latest opening whose window holds now, and
// whether there is one: an opening s with s <= now < s+duration.
func (w Window) openedAt(now time.Time) (time.Time, bool) {
	s := w.next(now.Add(-w.duration))
	if s.IsZero() || s.After(now) {
		return time.Time{}, false
	}
	latest := s
	for i := 0; i < maxChain; i++ {
		n := w.next(latest)
		if n.IsZero() || n.After(now) {
			break
		}
		latest = n
	}
	return latest, true
}

// Set is the windows of one tenant. The zero Set has no windows: nothing
// waits for it, and Open is always true.
type Set []Window

// Empty reports whether the set has no windows.
func (s Set) Empty() bool { return len(s) == 0 }

// Open reports whether disruptive work may run at now: the set is empty,
// or one of its windows is open.
func (s Set) Open(now time.Time) bool {
	if s.Empty() {
		return true
	}
	for _, w := range s {
		if _, ok := w.openedAt(now); ok {
			return true
		}
	}
	return false
}

// NextOpen returns now when the set is open, else the earliest opening
// after now; zero when no window ever opens again (a schedule of a date
// that does not come, such as 30 February).
func (s Set) NextOpen(now time.Time) time.Time {
	if s.Open(now) {
		return now
	}
	var first time.Time
	for _, w := range s {
		if n := w.next(now); !n.IsZero() && (first.IsZero() || n.Before(first)) {
			first = n
		}
	}
	return first
}

// CloseAt returns when the windows open at now close, following windows
// that overlap or adjoin the open one; now itself when the set is closed
// at now. An empty set never closes: it returns the zero time.
func (s Set) CloseAt(now time.Time) time.Time {
	if s.Empty() {
		return time.Time{}
	}
	end := now
	for i := 0; i < maxChain; i++ {
		grew := false
		for _, w := range s {
			if o, ok := w.openedAt(end); ok && o.Add(w.duration).After(end) {
				end, grew = o.Add(w.duration), true
			}
		}
		if !grew {
			break
		}
	}
	return end
}

// WaitError says that work waits for a maintenance window: nothing of it
// ran, and it may run from Next on.
type WaitError struct {
	// What says what waits, for a status message: "scale-down of
	// workers (2 machines)".
	What string
	// Next is when the next window opens; zero when none opens again.
	Next time.Time
}

// Wait returns the wait of what, which may not run at now: it runs at the
// set's next opening.
func (s Set) Wait(what string, now time.Time) *WaitError {
	return &WaitError{What: what, Next: s.NextOpen(now)}
}

func (e *WaitError) Error() string { return e.What + " waits for a maintenance window" }

// Message says in a sentence what waits and when it runs.
func (e *WaitError) Message() string {
	return fmt.Sprintf("%s waits for the window opening %s", e.What, e.Next.UTC().Format(time.RFC3339))
}
