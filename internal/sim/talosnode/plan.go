package talosnode

import (
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// Timings are the simulated durations of a node's stages. The zero value of
// a field means its default.
type Timings struct {
	// Boot is the booting stage, from power-on or the end of a reboot until
	// the node runs (or waits in maintenance mode). Default 1.5 s.
	Boot time.Duration
	// Install is the installing stage of a metal machine's first config,
	// before it reboots into the installed system. Default 1 s.
	Install time.Duration
	// Reboot is a reboot: the rebooting stage for its first half (the API
	// still answers), then the machine is down and refuses connections for
	// the second half, then it boots. Default 1 s.
	Reboot time.Duration
	// Upgrade is the upgrading stage before the reboot into the new
	// version. Default 2 s.
	Upgrade time.Duration
	// Reset is the resetting stage before the reboot into maintenance
	// mode. Default 1 s.
	Reset time.Duration
	// Fallback is how long a node under the NoUpgradeReturn fault stays
	// down after the reboot of an upgrade, before its boot loader gives up
	// on the new version and boots the previous one. Default 10 s.
	Fallback time.Duration
	// LogInterval is how often a followed log gets a new line while
	// nothing else happens. Default 1 s.
	LogInterval time.Duration
}

// DefaultTimings suit the demo and tests that watch stages go by.
var DefaultTimings = Timings{
	Boot: 1500 * time.Millisecond, Install: time.Second, Reboot: time.Second,
	Upgrade: 2 * time.Second, Reset: time.Second, Fallback: 10 * time.Second,
	LogInterval: time.Second,
}

func (t Timings) withDefaults() Timings {
	d := DefaultTimings
	for _, f := range []struct{ v, def *time.Duration }{
		{&t.Boot, &d.Boot}, {&t.Install, &d.Install}, {&t.Reboot, &d.Reboot},
		{&t.Upgrade, &d.Upgrade}, {&t.Reset, &d.Reset}, {&t.Fallback, &d.Fallback},
		{&t.LogInterval, &d.LogInterval},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return t
}

// Effects a step has on a node when it begins.
const (
	effectInstalled   = "installed"      // the system is on disk
	effectActivate    = "activate"       // the staged config becomes the running one
	effectSwitch      = "switch-version" // the upgrade's version boots
	effectRollback    = "rollback"       // the previous version boots
	effectLeaveEtcd   = "leave-etcd"     // a reset's graceful leave
	effectWipe        = "wipe"           // a reset wipes the config and etcd data
	effectWipeData    = "wipe-ephemeral" // a reset wipes etcd's and the kubelet's data, not the config
	effectFellBack    = "fell-back"      // the boot loader boots the old version after a failed upgrade
	effectRebootCount = "rebooted"       // a reboot completed
	effectPowerOff    = "power-off"      // a reset without reboot ends powered off
)

// step is one timed stage of a plan.
type step struct {
	Stage runtime.MachineStage `json:"stage"`
	For   time.Duration        `json:"for"`
	// Down means the machine does not answer: its API port refuses
	// connections.
	Down bool `json:"down,omitempty"`
	// Effects happen, in order, when the step begins.
	Effects []string `json:"effects,omitempty"`
}

// plan is what a node goes through after a power-on or a write call. It is
// computed lazily: stages follow from Start and the steps' durations, and
// Done counts the steps whose effects were applied. Nothing runs while a
// node is idle.
type plan struct {
	Start time.Time `json:"start"`
	Steps []step    `json:"steps,omitempty"`
	Done  int       `json:"done"`
}

// end is when the last step is over.
func (p *plan) end() time.Time {
	t := p.Start
	for _, s := range p.Steps {
		t = t.Add(s.For)
	}
	return t
}

// at returns the step in progress at now and its index, or ok false once
// the plan is over.
func (p *plan) at(now time.Time) (s step, i int, ok bool) {
	t := p.Start
	for i, s := range p.Steps {
		t = t.Add(s.For)
		if now.Before(t) {
			return s, i, true
		}
	}
	return step{}, len(p.Steps), false
}

// resetting reports whether the plan is a reset in progress at now: one
// of its steps that began resets the machine, and the plan is not over.
// Talos stops the kubelet as a reset begins, and it does not come back
// before the machine boots again.
func (p *plan) resetting(now time.Time) bool {
	if _, _, ok := p.at(now); !ok {
		return false
	}
	return slices.ContainsFunc(p.Steps[:p.begun(now)], func(s step) bool { return s.Stage == runtime.MachineStageResetting })
}

// begun returns how many steps have begun at now.
func (p *plan) begun(now time.Time) int {
	t := p.Start
	for i, s := range p.Steps {
		if now.Before(t) {
			return i
		}
		t = t.Add(s.For)
	}
	return len(p.Steps)
}

// next returns the first step boundary after now, if the plan has one.
func (p *plan) next(now time.Time) (time.Time, bool) {
	t := p.Start
	for _, s := range p.Steps {
		if now.Before(t) {
			return t, true
		}
		t = t.Add(s.For)
	}
	if now.Before(t) {
		return t, true
	}
	return time.Time{}, false
}

// Plans.

func bootSteps(t Timings) []step {
	return []step{{Stage: runtime.MachineStageBooting, For: t.Boot}}
}

func rebootSteps(t Timings, downEffects ...string) []step {
	return append([]step{
		{Stage: runtime.MachineStageRebooting, For: t.Reboot / 2},
		{Stage: runtime.MachineStageRebooting, For: t.Reboot - t.Reboot/2, Down: true, Effects: append(downEffects, effectRebootCount)},
	}, bootSteps(t)...)
}

func installSteps(t Timings) []step {
	return append([]step{{Stage: runtime.MachineStageInstalling, For: t.Install}}, rebootSteps(t, effectInstalled)...)
}

func upgradeSteps(t Timings, hang bool) []step {
	return append([]step{{Stage: runtime.MachineStageUpgrading, For: t.Upgrade}}, switchSteps(t, hang)...)
}

// switchSteps are the reboot into an installed version; with hang the new
// version never comes up, and the machine stays down until the boot
// loader falls back to the previous version.
func switchSteps(t Timings, hang bool) []step {
	if !hang {
		return rebootSteps(t, effectActivate, effectSwitch)
	}
	return []step{
		{Stage: runtime.MachineStageRebooting, For: t.Reboot / 2},
		{Stage: runtime.MachineStageRebooting, For: t.Fallback, Down: true, Effects: []string{effectActivate, effectRebootCount}},
		{Stage: runtime.MachineStageBooting, For: t.Boot, Effects: []string{effectFellBack}},
	}
}

// resetSteps are a reset whose reboot applies wipe (effectWipe or
// effectWipeData).
func resetSteps(t Timings, graceful bool, wipe string) []step {
	s := step{Stage: runtime.MachineStageResetting, For: t.Reset}
	if graceful {
		s.Effects = []string{effectLeaveEtcd}
	}
	return append([]step{s}, rebootSteps(t, wipe)...)
}
