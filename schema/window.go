package schema

import (
	"strconv"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/window"
)

// MaintenanceWindow is a time in which disruptive work on a tenant's
// machines may run: it opens at each time Schedule names, in TimeZone,
// and stays open for Duration.
type MaintenanceWindow struct {
	// Schedule is a cron expression of five fields (minute, hour, day of
	// month, month, day of week), such as "0 2 * * 6" for Saturdays at
	// 02:00, or a descriptor such as "@daily".
	Schedule string `json:"schedule"`
	// Duration is a Go duration above zero, such as "4h".
	Duration string `json:"duration"`
	// TimeZone is the IANA name of the zone the schedule is read in, such
	// as "Europe/Berlin"; empty means UTC.
	TimeZone string `json:"timeZone,omitempty"`
}

// MaintenanceWindowSet parses a tenant's windows. Load has checked them, so
// an error here means the spec did not come from Load.
func (s *TenantSpec) MaintenanceWindowSet() (window.Set, error) {
	var set window.Set
	for _, w := range s.MaintenanceWindows {
		p, err := window.Parse(w.Schedule, w.Duration, w.TimeZone)
		if err != nil {
			return nil, err
		}
		set = append(set, p)
	}
	return set, nil
}

// checkMaintenanceWindows checks each window of a Tenant's
// spec.maintenanceWindows: its schedule, its duration and its zone, each
// reported at its own line. A field of the wrong type is the schema's
// problem.
func checkMaintenanceWindows(d *document, obj map[string]any) []Problem {
	var problems []Problem
	list, _ := lookup(obj, "/spec/maintenanceWindows").([]any)
	for i, item := range list {
		path := "/spec/maintenanceWindows/" + strconv.Itoa(i)
		if s, ok := lookup(item, "/schedule").(string); ok {
			if _, err := window.ParseSchedule(s); err != nil {
				problems = append(problems, d.problem(path+"/schedule", "%v", err))
			}
		}
		if s, ok := lookup(item, "/duration").(string); ok {
			if _, err := window.ParseDuration(s); err != nil {
				problems = append(problems, d.problem(path+"/duration", "%v", err))
			}
		}
		if s, ok := lookup(item, "/timeZone").(string); ok {
			if _, err := window.ParseZone(s); err != nil {
				problems = append(problems, d.problem(path+"/timeZone", "%v", err))
			}
		}
	}
	return problems
}

// MaintenanceStatus says what of a tenant's desired state waits for a
// maintenance window, and when the next one opens. A run that leaves
// nothing waiting clears it.
type MaintenanceStatus struct {
	// Waiting says what waits: "scale-down of workers (2 machines)"; the
	// Reconciling condition says it in a sentence.
	Waiting string `json:"waiting"`
	// NextWindow is when the next window opens; the waiting work runs
	// then.
	NextWindow time.Time `json:"nextWindow"`
}

// decodeWindows reads spec.maintenanceWindows of a checked Tenant.
func decodeWindows(v any) []MaintenanceWindow {
	list, _ := v.([]any)
	var out []MaintenanceWindow
	for _, item := range list {
		m := asMap(item)
		out = append(out, MaintenanceWindow{Schedule: asString(m["schedule"]), Duration: asString(m["duration"]), TimeZone: asString(m["timeZone"])})
	}
	return out
}
