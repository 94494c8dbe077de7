package history

import (
	"fmt"
	"time"
)

// Options are the retention of Compact. The zero value of a field selects
// its default.
type Options struct {
	// Full is how long samples keep their full resolution (one a
	// minute). Default 24h.
	Full time.Duration
	// Step is the resolution samples older than Full are downsampled
	// to: a whole number of minutes that divides a day. Default 1h.
	Step time.Duration
	// Keep is how long anything is kept, counted in whole days from
	// the end of the day it falls in. Default 720h (30 days).
	Keep time.Duration
}

// Default retention.
const (
	DefaultFull = 24 * time.Hour
	DefaultStep = time.Hour
	DefaultKeep = 30 * 24 * time.Hour
)

// withDefaults returns o with its zero fields set to the defaults, or an
// error saying which field is wrong.
func (o Options) withDefaults() (Options, error) {
	if o.Full == 0 {
		o.Full = DefaultFull
	}
	if o.Step == 0 {
		o.Step = DefaultStep
	}
	if o.Keep == 0 {
		o.Keep = DefaultKeep
	}
	return o, o.Validate()
}

// Validate says what is wrong with o, if anything, in the words of the
// server's flags.
func (o Options) Validate() error {
	switch {
	case o.Full < time.Hour:
		return fmt.Errorf("history full resolution %s: want at least 1h", o.Full)
	case o.Step < time.Minute || o.Step%time.Minute != 0 || day%o.Step != 0:
		return fmt.Errorf("history step %s: want whole minutes that divide 24h (1m, 5m, 1h…)", o.Step)
	case o.Keep < o.Full:
		return fmt.Errorf("history keep %s: want at least the full resolution's %s", o.Keep, o.Full)
	}
	return nil
}

// Query selects a window of history.
type Query struct {
	// Since and Until bound the window; a zero Until is now.
	Since, Until time.Time
	// Step, when set, resamples the samples to that resolution (at
	// least a minute); zero keeps the stored resolution.
	Step time.Duration
}

const (
	day    = 24 * time.Hour
	minute = time.Minute
)
