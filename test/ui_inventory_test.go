package test

import (
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rezuscloud/rezuscloud/internal/servertest"
	"github.com/rezuscloud/rezuscloud/schema"
)

// TestUIInventory opens the dashboard of a server whose simulated
// machines went through a rolling upgrade, in a real Chromium: the tenant
// page draws a band per machine with the rollout and its reboots marked
// and the availability bar, and follows a restart of the workers without
// a reload; the overview draws each tenant's bar, and a control plane's
// page its inventory and sparklines of its gauges. rezusctl selects
// machines by their derived hardware labels, prints the inventory and the
// history. Screenshots of the pages are kept as artifacts.
func TestUIInventory(t *testing.T) {
	chromiumPath(t) // skips before the server starts when there is no Chromium
	e := newE2E(t, e2eOptions{args: planeArgs("--history-sample-interval", "1s")})
	s := e.srv
	planeWaitReady(t, e, "production")
	s.waitApplied(planeBump(e, "1.12.7"))
	s.WaitFor("production's machines to run Talos 1.12.7", func() bool {
		ms := s.tenantMachines("production")
		for _, m := range ms {
			if strings.TrimPrefix(m.Status.TalosVersion, "v") != "1.12.7" || !m.Status.Ready {
				return false
			}
		}
		return len(ms) == 5
	})
	b := newBrowser(t, s.URL())

	t.Run("tenant timeline", func(t *testing.T) {
		b.t = t
		b.open("/tenants/production")
		const chart = `document.querySelector('svg[data-chart="timeline"]')`
		if !b.waitFor(chart+` !== null && `+chart+`.querySelectorAll("g[data-band]").length === 5`, 10*time.Second) {
			t.Fatalf("the tenant page has no timeline of 5 machines:\n%s", eval[string](b, `(`+chart+`||{outerHTML:"none"}).outerHTML`))
		}
		// The rollout is one shaded stretch; each machine's band shows the
		// stages of its upgrade and a reboot tick.
		if n := eval[int](b, chart+`.querySelectorAll("rect.mark-rollout").length`); n != 1 {
			t.Errorf("%d rollouts on the timeline, want 1", n)
		}
		title := eval[string](b, chart+`.querySelector("rect.mark-rollout title").textContent`)
		if !strings.Contains(title, "rollout started") || !strings.Contains(title, "rollout finished") {
			t.Errorf("the rollout's title is %q, want its start and end", title)
		}
		busy := eval[int](b, chart+`.querySelectorAll("g[data-band] rect.stage-busy").length`)
		reboots := eval[int](b, chart+`.querySelectorAll("g[data-band] .mark-reboot").length`)
		if busy < 5 || reboots < 5 {
			t.Errorf("the bands show %d stretches of a busy stage and %d reboots, want one of each for each of the 5 machines at least", busy, reboots)
		}
		// Drawn: the bands have a width and the stylesheet's colours.
		if w := eval[float64](b, chart+`.getBoundingClientRect().width`); w < 600 {
			t.Errorf("the timeline is %.0f px wide", w)
		}
		if fill := eval[string](b, `getComputedStyle(`+chart+`.querySelector("g[data-band] rect.stage-ready")).fill`); fill != "rgb(31, 138, 76)" {
			t.Errorf("a ready stretch is filled %q, want the ok green", fill)
		}
		if !strings.Contains(b.text(), "fully available") {
			t.Error("the tenant page does not say how available the tenant was")
		}
		b.screenshot("tenant-timeline")
	})

	t.Run("timeline follows live", func(t *testing.T) {
		b.t = t
		const reboots = `document.querySelectorAll('svg[data-chart="timeline"] g[data-band] .mark-reboot').length`
		before := eval[int](b, reboots)
		b.do("mark the page", chromedp.Evaluate[chromedp.Void](`window.rezusMarker = "same page"`))
		e.edit(e2eManifests+"/production/nodegroups.yaml", "  name: workers\n", "  name: workers\n  annotations:\n    rezuscloud.io/restartedAt: \"2026-12-05T10:00:00Z\"\n")
		s.waitApplied(e.push("Restart production's workers"))
		if !b.waitFor(fmt.Sprintf("%s >= %d", reboots, before+2), 30*time.Second) {
			t.Errorf("the open page shows %d reboots, want %d: the workers' reboots did not arrive", eval[int](b, reboots), before+2)
		}
		if got := eval[string](b, `window.rezusMarker || ""`); got != "same page" {
			t.Error("the page was reloaded")
		}
		b.screenshot("tenant-timeline-restart")
	})

	t.Run("overview bars", func(t *testing.T) {
		b.t = t
		b.open("/")
		for _, tenant := range []string{"production", "staging"} {
			q := fmt.Sprintf(`document.querySelector('a[href="/tenants/%s"]').closest("tr").querySelector('svg[data-chart="availability"]')`, tenant)
			if !b.waitFor(q+` !== null && `+q+`.querySelectorAll("rect[class^=cond-]").length > 0`, 5*time.Second) {
				t.Errorf("the overview has no availability bar of %s", tenant)
			}
		}
		b.screenshot("overview-availability")
	})

	t.Run("machine inventory and sparklines", func(t *testing.T) {
		b.t = t
		var cp schema.Machine
		for _, m := range s.tenantMachines("production") {
			if m.Spec.Role == schema.RoleControlPlane {
				cp = m
				break
			}
		}
		s.WaitFor(cp.Spec.Hostname+"'s inventory in the API", func() bool {
			var m schema.Machine
			s.mustGet("/api/v1/machines/"+cp.Metadata.Name, &m)
			return m.Status.Hardware != nil && m.Status.Network != nil && m.Status.Schematic != nil
		})
		b.open("/tenants/production/machines/" + cp.Metadata.Name)
		hw := eval[string](b, `document.querySelector("[data-hardware]").innerText`)
		if !strings.Contains(hw, "CPUs") || !strings.Contains(hw, "system disk") {
			t.Errorf("the hardware card says:\n%s\nwant the CPUs and the system disk", hw)
		}
		if net := eval[string](b, `document.querySelector("[data-network]").innerText`); !strings.Contains(net, cp.Spec.ManagementAddress) {
			t.Errorf("the network card says:\n%s\nwant the address %s", net, cp.Spec.ManagementAddress)
		}
		if id := eval[string](b, `(document.querySelector("[data-schematic] code")||{textContent:""}).textContent`); len(id) != 64 {
			t.Errorf("the schematic ID is %q, want 64 hex digits", id)
		}
		// The samples come every second here: the sparklines appear on the
		// open page, without a reload, within the part's refresh.
		const spark = `document.querySelectorAll('[data-gauge] svg.spark :is(path.spark-line, circle.spark-dot)').length`
		if !b.waitFor(spark+` >= 3`, 75*time.Second) {
			t.Errorf("%d sparklines with a line on a control plane's page, want load, memory and etcd", eval[int](b, spark))
		}
		b.screenshot("machine-inventory")
	})

	t.Run("cli", func(t *testing.T) {
		ctl := func(args ...string) string {
			t.Helper()
			cmd := exec.Command(servertest.CLI(t), args...)
			cmd.Env = []string{"HOME=" + t.TempDir(), "REZUSCLOUD_SERVER=" + s.URL(), "NO_COLOR=1"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("rezusctl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		// The sim's medium shape (the control planes) has 4 CPUs, its
		// large one (the workers) 8.
		names := strings.Fields(ctl("get", "machines", "-t", "production", "-l", "hardware.rezuscloud.io/cpus=4", "-o", "name"))
		var cps []string
		for _, m := range s.tenantMachines("production") {
			if m.Spec.Role == schema.RoleControlPlane {
				cps = append(cps, "machine/"+m.Metadata.Name)
			}
		}
		slices.Sort(names)
		slices.Sort(cps)
		if !slices.Equal(names, cps) {
			t.Errorf("machines with 4 CPUs: %v, want the control planes %v", names, cps)
		}
		wide := ctl("get", "machines", "-t", "production", "-o", "wide")
		if !regexp.MustCompile(`(?m)^sim-\S+ +production +workers +.* +8 +\d+Gi +\d+Gi +[0-9a-f]{8} +\S+$`).MatchString(wide) {
			t.Errorf("get machines -o wide has no worker's CPU, memory, disk and schematic:\n%s", wide)
		}
		desc := ctl("describe", "machine", strings.TrimPrefix(cps[0], "machine/"))
		for _, want := range []string{"  Hardware:\n", "    CPUs:", "  Network:\n", "  Schematic:\n", "system", "Extensions:"} {
			if !strings.Contains(desc, want) {
				t.Errorf("describe machine lacks %q:\n%s", want, desc)
			}
		}
		hist := ctl("get", "history", "production")
		for _, want := range []string{"rollout started", "rollout finished", "reboot", "restarting"} {
			if !strings.Contains(hist, want) {
				t.Errorf("get history production lacks %q:\n%s", want, hist)
			}
		}
	})

	t.Run("no other host and no console error", func(t *testing.T) {
		b.t = t
		b.checkRequests()
		b.checkConsole()
	})
}
