package talosnode

import (
	"context"
	"crypto/rand"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// machineAPI is the MachineService of every node of a host; each call
// finds its node through callOf.
type machineAPI struct {
	machine.UnimplementedMachineServiceServer
	h *Host
}

func meta(n *node) *common.Metadata { return &common.Metadata{Hostname: n.hostname()} }

func actorID() string {
	var b [16]byte
	rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// Version answers the running version; the maintenance server refuses it.
func (a *machineAPI) Version(ctx context.Context, _ *emptypb.Empty) (*machine.VersionResponse, error) {
	n := callOf(ctx).n
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	mode := "cloud"
	if n.st.Metal {
		mode = "metal"
	}
	return &machine.VersionResponse{Messages: []*machine.Version{{
		Metadata: meta(n),
		Version: &machine.VersionInfo{
			Tag: n.st.Version, Sha: hashHex([]byte(n.st.Version))[:8], Built: "2026-01-01T00:00:00Z",
			GoVersion: runtime.Version(), Os: "linux", Arch: "amd64",
		},
		Platform: &machine.PlatformInfo{Name: n.st.Platform, Mode: mode},
		Features: &machine.FeaturesInfo{Rbac: true},
	}}}, nil
}

// journal records a write call and its outcome on the node's journal.
func (a *machineAPI) journal(n *node, e JournalEntry, err error) {
	if err != nil {
		e.Error = err.Error()
	}
	if jerr := a.h.appendJournal(n, e); jerr != nil {
		a.h.log.Warn("journal", "machine", n.st.ID, "err", jerr)
	}
}

// begin fills a journal entry with the call's time and the node's stage
// and version. Called with h.mu held.
func (a *machineAPI) begin(n *node, callName string) JournalEntry {
	now := a.h.now()
	return JournalEntry{Time: now.UTC(), Call: callName, Stage: n.viewAt(now).Stage.String(), Version: n.st.Version}
}

func modeName(m machine.ApplyConfigurationRequest_Mode) string { return strings.ToLower(m.String()) }

// ApplyConfiguration takes a config as Talos does: in maintenance mode it
// becomes the node's first config (metal machines then install); on a
// configured node it applies live, at the next reboot, with a reboot, or
// for a try period, by mode (see canApplyImmediately for auto's rule).
func (a *machineAPI) ApplyConfiguration(ctx context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	h, n := a.h, callOf(ctx).n
	h.mu.Lock()
	e := a.begin(n, "ApplyConfiguration")
	e.Mode, e.DryRun, e.ConfigSHA256 = modeName(in.Mode), in.DryRun, hashHex(in.Data)
	maint := n.st.Running == nil
	vmode := validationMode{metal: n.st.Metal, installed: n.st.Installed}
	var cur string
	if !maint {
		cur = n.st.Running.Hash
		if in.Mode != machine.ApplyConfigurationRequest_TRY && n.st.Revert != nil {
			n.st.Revert, n.st.TryUntil = nil, time.Time{} // confirms a tried config
		}
	}
	h.mu.Unlock()
	var (
		resp *machine.ApplyConfigurationResponse
		err  error
	)
	if maint {
		resp, err = a.applyInMaintenance(n, in, vmode, &e)
	} else {
		resp, err = a.applyRunning(n, in, vmode, cur, &e)
	}
	a.journal(n, e, err)
	return resp, err
}

func (a *machineAPI) applyInMaintenance(n *node, in *machine.ApplyConfigurationRequest, vmode validationMode, e *JournalEntry) (*machine.ApplyConfigurationResponse, error) {
	switch in.Mode {
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_REBOOT, machine.ApplyConfigurationRequest_AUTO:
	default:
		return nil, status.Errorf(codes.Unimplemented, "apply configuration --mode='%s' is not supported in maintenance mode",
			strings.ReplaceAll(modeName(in.Mode), "_", "-"))
	}
	cfg, err := configloader.NewFromBytes(in.Data)
	if err != nil {
		return nil, fmt.Errorf("failed to parse config: %w", err)
	}
	warnings, err := cfg.Validate(vmode)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "configuration validation failed: %s", err)
	}
	reply := &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{Metadata: meta(n), Warnings: warnings}}}
	if in.DryRun {
		reply.Messages[0].ModeDetails = "Dry run summary:\nNode is running in maintenance mode and does not have a config yet."
		return reply, nil
	}
	sum, err := summarize(cfg)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "configuration validation failed: %s", err)
	}
	if err := a.h.writeConfig(n, e.ConfigSHA256, in.Data); err != nil {
		return nil, err
	}
	a.h.mu.Lock()
	if n.st.Running != nil {
		a.h.mu.Unlock()
		return nil, status.Error(codes.FailedPrecondition, "the node received a config meanwhile")
	}
	n.st.Running = &configRef{Hash: e.ConfigSHA256, Summary: sum}
	if n.st.Metal && !n.st.Installed {
		n.start(a.h.now(), installSteps(a.h.t))
	} else {
		n.start(a.h.now(), bootSteps(a.h.t))
	}
	a.h.index(n)
	save := a.h.changed(n)
	a.h.mu.Unlock()
	e.Applied = modeName(in.Mode)
	return reply, save()
}

func (a *machineAPI) applyRunning(n *node, in *machine.ApplyConfigurationRequest, vmode validationMode, curHash string, e *JournalEntry) (*machine.ApplyConfigurationResponse, error) {
	next, err := configloader.NewFromBytes(in.Data)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if next.RawV1Alpha1() == nil {
		return nil, status.Error(codes.InvalidArgument, "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?")
	}
	warnings, err := next.Validate(vmode)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	sum, err := summarize(next)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	curBytes, err := a.h.readConfig(n.dir, curHash)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	cur, err := configloader.NewFromBytes(curBytes)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	mode, details, modeErr := in.Mode, "Applied configuration with a reboot", ""
	switch in.Mode {
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
		if err := canApplyImmediately(cur, next); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		details = "Applied configuration without a reboot"
	case machine.ApplyConfigurationRequest_STAGED:
		details = "Staged configuration to be applied after the next reboot"
	case machine.ApplyConfigurationRequest_AUTO:
		if err := canApplyImmediately(cur, next); err != nil {
			mode, modeErr = machine.ApplyConfigurationRequest_REBOOT, ": "+err.Error()
		} else {
			mode, details = machine.ApplyConfigurationRequest_NO_REBOOT, "Applied configuration without a reboot"
		}
	case machine.ApplyConfigurationRequest_REBOOT:
	default:
		return nil, fmt.Errorf("incorrect mode '%s' specified for the apply config call", in.Mode.String())
	}
	e.Applied = modeName(mode)
	if in.DryRun {
		d, err := diffSummary(cur, next)
		if err != nil {
			return nil, err
		}
		return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
			Metadata: meta(n), Mode: mode, ModeDetails: fmt.Sprintf("Dry run summary:\n%s (skipped in dry-run).\n%s", details, d),
		}}}, nil
	}
	var timeout time.Duration
	if mode == machine.ApplyConfigurationRequest_TRY {
		timeout = constants.ConfigTryTimeout
		if in.TryModeTimeout != nil {
			timeout = in.TryModeTimeout.AsDuration()
		}
		details += fmt.Sprintf("\nThe config is applied in 'try' mode and will be automatically reverted back in %s", timeout)
	}
	if err := a.h.writeConfig(n, e.ConfigSHA256, in.Data); err != nil {
		return nil, err
	}
	save := a.commitApply(n, mode, &configRef{Hash: e.ConfigSHA256, Summary: sum}, timeout)
	return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
		Metadata: meta(n), Mode: mode, Warnings: warnings, ModeDetails: details + modeErr,
	}}}, save()
}

// commitApply makes ref the node's config the way mode says.
func (a *machineAPI) commitApply(n *node, mode machine.ApplyConfigurationRequest_Mode, ref *configRef, try time.Duration) func() error {
	h := a.h
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	h.advance(n, now)
	switch mode {
	case machine.ApplyConfigurationRequest_TRY:
		if n.st.Revert == nil {
			n.st.Revert = n.st.Running
		}
		n.st.Running, n.st.TryUntil = ref, now.Add(try)
	case machine.ApplyConfigurationRequest_NO_REBOOT:
		n.st.Running, n.st.Staged = ref, nil
	case machine.ApplyConfigurationRequest_STAGED:
		n.st.Staged = ref
	case machine.ApplyConfigurationRequest_REBOOT:
		n.st.Staged = ref
		n.start(now, rebootSteps(h.t, effectActivate))
	}
	h.index(n)
	return h.changed(n)
}
