package talosnode

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// service is the state of one simulated service of a node.
type service struct {
	ID, State, Message string
	// Health: unknown for services without a health check.
	HealthUnknown bool
	Healthy       bool
	HealthMessage string
	Since         time.Time
}

// services returns the services of a configured node at now, as Talos's
// ServiceList would show them. Besides Talos's own services it lists
// kube-apiserver on control planes, Running once etcd has quorum: the
// static pod that real Talos reports through Kubernetes. Called with h.mu
// held.
func (h *Host) services(n *node, now time.Time) []service {
	v := n.viewAt(now)
	since := n.st.UpSince
	if v.Busy || since.IsZero() {
		since = n.st.Plan.Start
	}
	booting := v.Busy
	run := func(id string, health bool) service {
		s := service{ID: id, State: "Running", Message: "Service started as goroutine", Since: since, HealthUnknown: !health, Healthy: health}
		if health {
			s.HealthMessage = "Health check successful"
		}
		return s
	}
	out := []service{
		run("apid", true), run("auditd", false), run("containerd", true), run("cri", true),
		run("dashboard", false), run("machined", true), run("syslogd", false), run("udevd", true),
	}
	kubelet := run("kubelet", true)
	if booting {
		kubelet = service{ID: "kubelet", State: "Waiting", Message: `Waiting for service "cri" to be "up"`, Since: since, HealthUnknown: true}
	}
	out = append(out, kubelet)
	if n.controlPlane() {
		out = append(out, run("trustd", true))
		out = append(out, h.controlPlaneServices(n, now, since, booting)...)
	}
	for i := range out {
		if t, ok := n.st.Restarted[out[i].ID]; ok && out[i].State == "Running" {
			out[i].Since = later(out[i].Since, t)
		}
		if out[i].ID == n.fault.Unhealthy && out[i].State == "Running" {
			out[i].HealthUnknown, out[i].Healthy = false, false
			out[i].HealthMessage = unhealthyMessage(out[i].ID)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// controlPlaneServices are etcd and kube-apiserver. Called with h.mu held.
func (h *Host) controlPlaneServices(n *node, now, since time.Time, booting bool) []service {
	etcd := service{ID: "etcd", State: "Preparing", Message: "Running pre state", Since: since, HealthUnknown: true}
	api := service{ID: "kube-apiserver", State: "Waiting", Message: "Waiting for etcd quorum", Since: since, HealthUnknown: true}
	if booting {
		etcd.State, etcd.Message = "Waiting", `Waiting for service "cri" to be "up"`
		return []service{etcd, api}
	}
	ms := h.members(n.cluster(), now)
	ok, _ := quorum(ms)
	if n.st.Etcd.Member {
		etcd = service{ID: "etcd", State: "Running", Message: "Health check successful", Since: later(since, n.st.Etcd.JoinedAt), Healthy: ok}
		if ok {
			etcd.HealthMessage = "Health check successful"
		} else {
			etcd.HealthMessage = "etcdserver: no leader"
		}
		if ok {
			api = service{ID: "kube-apiserver", State: "Running", Message: "Health check successful", Since: etcd.Since, Healthy: true, HealthMessage: "Health check successful"}
		}
	}
	return []service{etcd, api}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func unhealthyMessage(id string) string {
	switch id {
	case "kubelet":
		return `Get "http://127.0.0.1:10248/healthz": dial tcp 127.0.0.1:10248: connect: connection refused`
	case "etcd":
		return "etcdserver: request timed out"
	}
	return fmt.Sprintf("%s: health check failed", id)
}

// ServiceList lists the node's services.
func (a *machineAPI) ServiceList(ctx context.Context, _ *emptypb.Empty) (*machine.ServiceListResponse, error) {
	h, n := a.h, callOf(ctx).n
	h.mu.Lock()
	defer h.mu.Unlock()
	var infos []*machine.ServiceInfo
	for _, s := range h.services(n, h.now()) {
		ts := timestamppb.New(s.Since)
		infos = append(infos, &machine.ServiceInfo{
			Id: s.ID, State: s.State,
			Events: &machine.ServiceEvents{Events: []*machine.ServiceEvent{{Msg: s.Message, State: s.State, Ts: ts}}},
			Health: &machine.ServiceHealth{Unknown: s.HealthUnknown, Healthy: s.Healthy, LastMessage: s.HealthMessage, LastChange: ts},
		})
	}
	return &machine.ServiceListResponse{Messages: []*machine.ServiceList{{Metadata: meta(n), Services: infos}}}, nil
}

// machineStatus is MachineStatus's spec at now, with Talos's readiness
// checks for the booting and running stages (other stages have none and
// are ready). Called with h.mu held.
func (h *Host) machineStatus(n *node, now time.Time) runtime.MachineStatusSpec {
	h.advance(n, now)
	v := n.viewAt(now)
	spec := runtime.MachineStatusSpec{Stage: v.Stage, Status: runtime.MachineStatusStatus{Ready: true}}
	if v.Stage != runtime.MachineStageBooting && v.Stage != runtime.MachineStageRunning {
		return spec
	}
	if n.st.Running == nil {
		spec.Status.Ready = false
		spec.Status.UnmetConditions = []runtime.UnmetCondition{{Name: "network", Reason: "waiting on: address"}}
		return spec
	}
	required := map[string]bool{"apid": true, "machined": true, "kubelet": true}
	if n.controlPlane() {
		required["etcd"], required["trustd"] = true, true
	}
	var problems []string
	apiRunning := false
	for _, s := range h.services(n, now) {
		switch {
		case s.ID == "kube-apiserver":
			apiRunning = s.State == "Running"
		case s.State != "Running":
			if required[s.ID] {
				problems = append(problems, s.ID+" not running")
			}
		case !s.HealthUnknown && !s.Healthy:
			problems = append(problems, s.ID+" not healthy")
		}
	}
	if len(problems) > 0 {
		spec.Status.UnmetConditions = append(spec.Status.UnmetConditions, runtime.UnmetCondition{Name: "services", Reason: strings.Join(problems, ", ")})
	}
	if n.controlPlane() && !apiRunning {
		spec.Status.UnmetConditions = append(spec.Status.UnmetConditions, runtime.UnmetCondition{Name: "staticPods", Reason: "kube-system/kube-apiserver-" + n.hostname() + " pending"})
	}
	spec.Status.Ready = len(spec.Status.UnmetConditions) == 0
	return spec
}

// ServiceRestart restarts one of the node's services, as Talos does for
// those it lets the API restart: every service the node lists but
// machined. The service runs again at once; ServiceList shows it running
// since then.
func (a *machineAPI) ServiceRestart(ctx context.Context, in *machine.ServiceRestartRequest) (*machine.ServiceRestartResponse, error) {
	h, n := a.h, callOf(ctx).n
	id := in.GetId()
	h.mu.Lock()
	e := a.begin(n, "ServiceRestart")
	e.Service = id
	now := h.now()
	h.advance(n, now)
	var err error
	switch known := slices.ContainsFunc(h.services(n, now), func(s service) bool { return s.ID == id }); {
	case !known:
		err = fmt.Errorf("service %q not defined", id)
	case id == "machined":
		err = fmt.Errorf("service %q doesn't support restart operation via API", id)
	}
	if err != nil {
		h.mu.Unlock()
		a.journal(n, e, err)
		return nil, err
	}
	if n.st.Restarted == nil {
		n.st.Restarted = map[string]time.Time{}
	}
	n.st.Restarted[id] = now
	save := h.changed(n)
	h.mu.Unlock()
	err = save()
	a.journal(n, e, err)
	if err != nil {
		return nil, err
	}
	return &machine.ServiceRestartResponse{Messages: []*machine.ServiceRestart{{Metadata: meta(n), Resp: fmt.Sprintf("Service %q restarted", id)}}}, nil
}
