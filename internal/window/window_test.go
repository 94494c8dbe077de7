package window

import (
	"strings"
	"testing"
	"time"
)

func mustSet(t *testing.T, ws ...[3]string) Set {
	t.Helper()
	var s Set
	for _, w := range ws {
		p, err := Parse(w[0], w[1], w[2])
		if err != nil {
			t.Fatal(err)
		}
		s = append(s, p)
	}
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestSet(t *testing.T) {
	daily := [3]string{"0 2 * * *", "4h", "UTC"}
	// 22:00 in Berlin for 4 hours: across midnight, 21:00Z-01:00Z in winter.
	night := [3]string{"0 22 * * *", "4h", "Europe/Berlin"}
	friday := [3]string{"0 23 * * 5", "3h", "UTC"}
	// 01:00 in Berlin for 3 hours, on the days the clocks change.
	berlin1 := [3]string{"0 1 * * *", "3h", "Europe/Berlin"}
	// 02:30 in Berlin does not exist on 29 March 2026 and exists twice
	// on 25 October 2026.
	berlin230 := [3]string{"30 2 * * *", "1h", "Europe/Berlin"}
	newYork := [3]string{"0 3 * * 0", "2h", "America/New_York"}
	tests := []struct {
		name       string
		set        Set
		now        string
		open       bool
		next, shut string // next opening (when closed), closing (when open)
	}{
		{"before", mustSet(t, daily), "2026-12-02T01:59:00Z", false, "2026-12-02T02:00:00Z", ""},
		{"at the opening", mustSet(t, daily), "2026-12-02T02:00:00Z", true, "", "2026-12-02T06:00:00Z"},
		{"inside", mustSet(t, daily), "2026-12-02T05:59:59Z", true, "", "2026-12-02T06:00:00Z"},
		{"at the close", mustSet(t, daily), "2026-12-02T06:00:00Z", false, "2026-12-03T02:00:00Z", ""},
		{"midnight: before it", mustSet(t, night), "2026-12-01T22:30:00Z", true, "", "2026-12-02T01:00:00Z"},
		{"midnight: after it", mustSet(t, night), "2026-12-02T00:30:00Z", true, "", "2026-12-02T01:00:00Z"},
		{"midnight: closed", mustSet(t, night), "2026-12-02T01:00:00Z", false, "2026-12-02T21:00:00Z", ""},
		{"midnight in summer time", mustSet(t, night), "2026-07-01T12:00:00Z", false, "2026-07-01T20:00:00Z", ""},
		{"a weekday's window into the next day", mustSet(t, friday), "2026-12-05T01:30:00Z", true, "", "2026-12-05T02:00:00Z"},
		{"the other days", mustSet(t, friday), "2026-12-05T02:00:00Z", false, "2026-12-11T23:00:00Z", ""},
		// 01:00 CET is 00:00Z; three hours later it is 05:00 CEST.
		{"spring forward: inside", mustSet(t, berlin1), "2026-03-29T02:30:00Z", true, "", "2026-03-29T03:00:00Z"},
		{"spring forward: next", mustSet(t, berlin1), "2026-03-28T12:00:00Z", false, "2026-03-29T00:00:00Z", ""},
		// 01:00 CEST is 23:00Z; three hours later it is 03:00 CET.
		{"fall back: inside", mustSet(t, berlin1), "2026-10-25T01:30:00Z", true, "", "2026-10-25T02:00:00Z"},
		{"fall back: the next day in winter time", mustSet(t, berlin1), "2026-10-25T02:00:00Z", false, "2026-10-26T00:00:00Z", ""},
		// A time the clocks skip does not open: the next opening is a day later.
		{"a skipped time", mustSet(t, berlin230), "2026-03-28T23:00:00Z", false, "2026-03-30T00:30:00Z", ""},
		// A time that happens twice opens twice; the two windows adjoin.
		{"a repeated time", mustSet(t, berlin230), "2026-10-25T00:45:00Z", true, "", "2026-10-25T02:30:00Z"},
		{"New York, EST", mustSet(t, newYork), "2026-12-06T10:00:00Z", false, "2026-12-13T08:00:00Z", ""},
		{"New York, EDT", mustSet(t, newYork), "2026-07-05T08:30:00Z", true, "", "2026-07-05T09:00:00Z"},
		{"two windows, the earlier next", mustSet(t, daily, friday), "2026-12-04T10:00:00Z", false, "2026-12-04T23:00:00Z", ""},
		{"two windows that overlap close together", mustSet(t, friday, daily), "2026-12-05T00:00:00Z", true, "", "2026-12-05T06:00:00Z"},
		{"adjoining windows", mustSet(t, [3]string{"0 2 * * *", "1h", ""}, [3]string{"0 3 * * *", "1h", ""}), "2026-12-02T02:30:00Z", true, "", "2026-12-02T04:00:00Z"},
		{"a duration longer than the period", mustSet(t, [3]string{"0 * * * *", "90m", ""}), "2026-12-02T02:30:00Z", true, "", "2027-01-01T00:00:00Z"},
		{"never", mustSet(t, [3]string{"0 0 30 2 *", "1h", ""}), "2026-12-02T02:30:00Z", false, "0001-01-01T00:00:00Z", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := utc(tc.now)
			if got := tc.set.Open(now); got != tc.open {
				t.Fatalf("Open(%s) = %v, want %v", tc.now, got, tc.open)
			}
			if tc.open {
				if got := tc.set.NextOpen(now); !got.Equal(now) {
					t.Errorf("NextOpen of an open set = %s, want now", got)
				}
				got := tc.set.CloseAt(now)
				if tc.name == "a duration longer than the period" {
					if !got.After(utc(tc.shut)) {
						t.Errorf("CloseAt = %s, want a window that never closes (after %s)", got, tc.shut)
					}
					return
				}
				if !got.Equal(utc(tc.shut)) {
					t.Errorf("CloseAt = %s, want %s", got.UTC().Format(time.RFC3339), tc.shut)
				}
				return
			}
			if got := tc.set.NextOpen(now); !got.Equal(utc(tc.next)) {
				t.Errorf("NextOpen = %s, want %s", got.UTC().Format(time.RFC3339), tc.next)
			}
			if got := tc.set.CloseAt(now); !got.Equal(now) {
				t.Errorf("CloseAt of a closed set = %s, want now", got)
			}
		})
	}
}

func TestEmptySetIsAlwaysOpen(t *testing.T) {
	var s Set
	now := utc("2026-12-02T12:00:00Z")
	if !s.Open(now) || !s.NextOpen(now).Equal(now) || !s.CloseAt(now).IsZero() {
		t.Fatalf("empty set: Open %v NextOpen %s CloseAt %s", s.Open(now), s.NextOpen(now), s.CloseAt(now))
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ schedule, duration, zone, want string }{
		{"0 2 * *", "4h", "UTC", `schedule "0 2 * *" is not a cron expression of five fields`},
		{"0 25 * * *", "4h", "UTC", `schedule "0 25 * * *"`},
		{"0 0 2 * * *", "4h", "UTC", `schedule "0 0 2 * * *"`},
		{"CRON_TZ=UTC 0 2 * * *", "4h", "UTC", "give the time zone in timeZone"},
		{"0 2 * * *", "4 hours", "UTC", `duration "4 hours" is not a Go duration`},
		{"0 2 * * *", "0s", "UTC", `duration "0s" must be above zero`},
		{"0 2 * * *", "-1h", "UTC", `duration "-1h" must be above zero`},
		{"0 2 * * *", "4h", "Mars/Olympus", `time zone "Mars/Olympus" is not a known IANA zone`},
		{"0 2 * * *", "4h", "Local", `time zone "Local" is not allowed`},
	}
	for _, tc := range tests {
		_, err := Parse(tc.schedule, tc.duration, tc.zone)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q, %q, %q) = %v, want an error with %q", tc.schedule, tc.duration, tc.zone, err, tc.want)
		}
	}
	if _, err := Parse("@daily", "1h", "Europe/Berlin"); err != nil {
		t.Errorf("@daily: %v", err)
	}
}

// BenchmarkOpen is the cost of asking two windows, one in a zone with
// daylight saving, whether they are open: what a tenant run and each
// machine of a rollout ask.
func BenchmarkOpen(b *testing.B) {
	s := Set{}
	for _, w := range [][3]string{{"0 2 * * 6", "4h", "Europe/Berlin"}, {"30 22 * * 1-5", "90m", "UTC"}} {
		p, err := Parse(w[0], w[1], w[2])
		if err != nil {
			b.Fatal(err)
		}
		s = append(s, p)
	}
	now := utc("2026-12-02T12:00:00Z")
	for b.Loop() {
		now = now.Add(time.Minute)
		if s.NextOpen(now).IsZero() {
			b.Fatal("never opens")
		}
	}
}

// TestWait: a wait names the set's next opening, and says what waits
// until when; a set whose windows never open again gives no time.
func TestWait(t *testing.T) {
	s := mustSet(t, [3]string{"0 2 * * *", "4h", "UTC"})
	w := s.Wait("scale-down of workers (2 machines)", utc("2026-12-02T07:00:00Z"))
	if !w.Next.Equal(utc("2026-12-03T02:00:00Z")) {
		t.Fatalf("next = %v, want the next day's opening", w.Next)
	}
	if got, want := w.Message(), "scale-down of workers (2 machines) waits for the window opening 2026-12-03T02:00:00Z"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	if got, want := w.Error(), "scale-down of workers (2 machines) waits for a maintenance window"; got != want {
		t.Fatalf("error %q, want %q", got, want)
	}
	never := mustSet(t, [3]string{"0 2 30 2 *", "1h", "UTC"})
	if w := never.Wait("reboot", utc("2026-12-02T07:00:00Z")); !w.Next.IsZero() {
		t.Fatalf("next = %v for windows on 30 February, want none", w.Next)
	}
}
