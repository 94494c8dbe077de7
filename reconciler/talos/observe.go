package talos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	configpb "github.com/siderolabs/talos/pkg/machinery/api/resource/config"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Observation is what one machine said about itself at one instant.
type Observation struct {
	Machine string    `json:"machine"`
	At      time.Time `json:"at"`
	// Connected is false when the machine did not answer (or refused the
	// tenant's credentials); Error then says why.
	Connected bool   `json:"connected"`
	Error     string `json:"error,omitempty"`
	// TalosStage is MachineStatus's stage as Talos names it ("running",
	// "rebooting", ...); Stage is its schema counterpart.
	TalosStage string              `json:"talosStage,omitempty"`
	Stage      schema.MachineStage `json:"stage,omitempty"`
	// Ready is MachineStatus's readiness; Unmet its unmet conditions.
	Ready bool     `json:"ready"`
	Unmet []string `json:"unmet,omitempty"`
	// Hostname is the machine's own, from Version.
	Hostname          string `json:"hostname,omitempty"`
	TalosVersion      string `json:"talosVersion,omitempty"`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// ConfigSHA256 is the SHA-256 of the running machine config as the
	// node serves it (COSI MachineConfig); "" when it has none.
	ConfigSHA256 string `json:"configSHA256,omitempty"`
	// Control planes only: the etcd service runs and is healthy, waits
	// for a bootstrap (Preparing), and kube-apiserver runs.
	EtcdHealthy      bool `json:"etcdHealthy,omitempty"`
	EtcdPreparing    bool `json:"etcdPreparing,omitempty"`
	APIServerRunning bool `json:"apiServerRunning,omitempty"`
	// Services are the machine's services (ServiceList), by name.
	Services []schema.MachineService `json:"services,omitempty"`
	// Etcd is a control plane's view of its etcd cluster
	// (EtcdMemberList); nil for workers.
	Etcd *schema.EtcdMembership `json:"etcd,omitempty"`
	// LastAnswered is when the machine last answered one of the
	// prober's probes: At when Connected, zero when it never did.
	LastAnswered time.Time `json:"lastAnswered,omitzero"`
	// Hardware, Network and Schematic are the machine's inventory; nil
	// when it was not read this time (see Prober) or is not served.
	Hardware  *schema.MachineHardware  `json:"hardware,omitempty"`
	Network   *schema.MachineNetwork   `json:"network,omitempty"`
	Schematic *schema.MachineSchematic `json:"schematic,omitempty"`
	// Maintenance: the machine waits in maintenance mode for its config.
	Maintenance bool `json:"maintenance,omitempty"`
}

// Busy reports whether the machine is between stages: booting,
// rebooting, upgrading, installing or resetting.
func (o Observation) Busy() bool {
	return o.Connected && o.TalosStage != runtime.MachineStageRunning.String() && o.TalosStage != runtime.MachineStageMaintenance.String()
}

// StageOf maps a Talos machine stage to the schema's stages; ready is
// MachineStatus's readiness. Talos's maintenance stage (a machine waiting
// for its first config) is schema.StageMaintenance.
func StageOf(s runtime.MachineStage, ready bool) schema.MachineStage {
	switch s {
	case runtime.MachineStageBooting, runtime.MachineStageUnknown:
		return schema.StageInitializing
	case runtime.MachineStageInstalling:
		return schema.StageInstalling
	case runtime.MachineStageMaintenance:
		return schema.StageMaintenance
	case runtime.MachineStageRunning:
		if ready {
			return schema.StageReady
		}
		return schema.StageConfiguring
	case runtime.MachineStageRebooting:
		return schema.StageRestarting
	case runtime.MachineStageShuttingDown:
		return schema.StageStopping
	case runtime.MachineStageResetting:
		return schema.StageRemoving
	case runtime.MachineStageUpgrading:
		return schema.StageUpdating
	}
	return schema.StageInitializing
}

// observe asks a machine through c: Version, MachineStatus and the running
// MachineConfig over COSI, ServiceList, for control planes
// EtcdMemberList, and the parts of its inventory in parts. The first call
// that fails for want of a connection ends the observation as not
// connected; other refusals are noted in Error (EtcdMemberList's in Etcd).
// known is the machine's observation before (zero without one), whose
// Kubernetes version stands while the config's hash does (readConfig).
func observe(ctx context.Context, c *client.Client, m Machine, now time.Time, parts inventoryPart, known Observation) Observation {
	o := Observation{Machine: m.ID, At: now}
	v, err := c.Version(ctx)
	if err != nil {
		o.Error = callError("Version", err)
		return o
	}
	o.Connected = true
	var arch string
	if msg := v.GetMessages(); len(msg) > 0 {
		o.Hostname = msg[0].GetMetadata().GetHostname()
		o.TalosVersion = intern(msg[0].GetVersion().GetTag())
		arch = msg[0].GetVersion().GetArch()
	}
	var errs []string
	for _, err := range []error{o.readMachineStatus(ctx, c), o.readConfig(ctx, c, known), o.readServices(ctx, c)} {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	if m.ControlPlane {
		o.Etcd = membership(etcdMembers(ctx, c), o.Hostname)
	}
	if parts != 0 {
		if err := o.readInventory(ctx, c, arch, parts); err != nil {
			errs = append(errs, err.Error())
		}
	}
	o.Error = strings.Join(errs, "; ")
	return o
}

// readMachineStatus fills the stage, readiness and unmet conditions.
func (o *Observation) readMachineStatus(ctx context.Context, c *client.Client) error {
	ms, err := safe.StateGet[*runtime.MachineStatus](ctx, c.COSI, runtime.NewMachineStatus().Metadata())
	if err != nil {
		return errors.New(callError("MachineStatus", err))
	}
	spec := ms.TypedSpec()
	o.TalosStage, o.Ready = spec.Stage.String(), spec.Status.Ready
	o.Stage = StageOf(spec.Stage, spec.Status.Ready)
	o.Maintenance = spec.Stage == runtime.MachineStageMaintenance
	o.Unmet = nil
	for _, u := range spec.Status.UnmetConditions {
		o.Unmet = append(o.Unmet, u.Name+": "+u.Reason)
	}
	return nil
}

// readConfig fills the running config's hash and Kubernetes version.
// The config is hashed as the node serves it, and parsed (for the
// Kubernetes version) only when its hash differs from known's, the
// machine's observation before, whose Kubernetes version it keeps
// otherwise: the parse was most of a timed probe's CPU. A read that fails
// keeps known's hash and version: a config the machine did not tell is
// not a config that differs (a machine that goes away during a probe
// would otherwise show as drifted).
func (o *Observation) readConfig(ctx context.Context, c *client.Client, known Observation) error {
	o.ConfigSHA256, o.KubernetesVersion = "", ""
	r, err := c.COSI.Get(ctx, config.NewMachineConfig(nil).Metadata(), state.WithGetUnmarshalOptions(state.WithSkipProtobufUnmarshal()))
	if state.IsNotFoundError(err) {
		return nil
	}
	if err != nil {
		o.ConfigSHA256, o.KubernetesVersion = known.ConfigSHA256, known.KubernetesVersion
		return errors.New(callError("MachineConfig", err))
	}
	b, err := configBytes(r)
	if err != nil {
		return fmt.Errorf("MachineConfig: %w", err)
	}
	sum := sha256.Sum256(b)
	o.ConfigSHA256 = hex.EncodeToString(sum[:])
	if o.ConfigSHA256 == known.ConfigSHA256 {
		o.KubernetesVersion = known.KubernetesVersion
		return nil
	}
	cfg, err := configloader.NewFromBytes(b)
	if err != nil {
		return fmt.Errorf("MachineConfig: %w", err)
	}
	if k := cfg.K8sKubeletConfig(); k != nil {
		o.KubernetesVersion = intern(imageTag(k.Image()))
	}
	return nil
}

// configBytes returns the config document that a MachineConfig resource
// read without unmarshalling (protobuf.Resource) carries: the bytes that
// the node loaded, which Talos's own unmarshalling parses.
func configBytes(r resource.Resource) ([]byte, error) {
	raw, ok := r.(*protobuf.Resource)
	if !ok {
		return nil, fmt.Errorf("read as %T, not as a raw resource", r)
	}
	pr, err := raw.Marshal()
	if err != nil {
		return nil, err
	}
	var spec configpb.MachineConfigSpec
	if err := proto.Unmarshal(pr.GetSpec().GetProtoSpec(), &spec); err != nil {
		return nil, err
	}
	return spec.GetYamlMarshalled(), nil
}

// readServices fills the services, and the etcd and kube-apiserver facts
// of a control plane.
func (o *Observation) readServices(ctx context.Context, c *client.Client) error {
	resp, err := c.ServiceList(ctx)
	if err != nil {
		return errors.New(callError("ServiceList", err))
	}
	n := 0
	for _, msg := range resp.GetMessages() {
		n += len(msg.GetServices())
	}
	o.Services = nil
	if n > 0 {
		o.Services = make([]schema.MachineService, 0, n)
	}
	for _, msg := range resp.GetMessages() {
		for _, s := range msg.GetServices() {
			o.Services = append(o.Services, serviceOf(s))
			switch s.GetId() {
			case "etcd":
				o.EtcdPreparing = s.GetState() == "Preparing"
				o.EtcdHealthy = s.GetState() == "Running" && s.GetHealth().GetHealthy()
			case "kube-apiserver":
				o.APIServerRunning = s.GetState() == "Running"
			}
		}
	}
	slices.SortFunc(o.Services, func(a, b schema.MachineService) int { return strings.Compare(a.Name, b.Name) })
	return nil
}

// maxServiceMessage bounds the health message kept of an unhealthy service.
const maxServiceMessage = 200

// serviceOf is a service as the machine's status keeps it: its state and
// health, and the health message only of an unhealthy one (a healthy
// service's says nothing, and a message that changed alone would write
// the status again).
func serviceOf(s *machine.ServiceInfo) schema.MachineService {
	ms := schema.MachineService{Name: intern(s.GetId()), State: intern(s.GetState())}
	switch h := s.GetHealth(); {
	case h == nil || h.GetUnknown():
	case h.GetHealthy():
		ms.Health = schema.ServiceHealthy
	default:
		ms.Health = schema.ServiceUnhealthy
		ms.Message = h.GetLastMessage()
		if len(ms.Message) > maxServiceMessage {
			ms.Message = strings.ToValidUTF8(ms.Message[:maxServiceMessage], "") + "…"
		}
	}
	return ms
}

// membership is a control plane's etcd membership from its answer to
// EtcdMemberList: whether hostname (its own) is among the members.
func membership(a etcdAnswer, hostname string) *schema.EtcdMembership {
	e := &schema.EtcdMembership{Members: slices.Sorted(slices.Values(a.Members))}
	if a.Err != nil {
		e.Error = callError("EtcdMemberList", a.Err)
	}
	e.Member = hostname != "" && slices.Contains(e.Members, hostname)
	return e
}

// imageTag returns the tag of an image reference, "" without one.
func imageTag(image string) string {
	if i := strings.LastIndex(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, ":"); i >= 0 && !strings.Contains(image[i:], "/") {
		return image[i+1:]
	}
	return ""
}

// callError describes a failed call in a few words: the gRPC message
// without the status wrapping.
func callError(call string, err error) string {
	if s, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s: %s", call, s.Message())
	}
	if ce := new(connect.Error); errors.As(err, &ce) {
		return fmt.Sprintf("%s: %s", call, ce.Message())
	}
	return fmt.Sprintf("%s: %v", call, err)
}

// codeOf is the gRPC code of err, from a call of a gRPC client or of a
// StreamConn's (connect's codes are gRPC's).
func codeOf(err error) codes.Code {
	if ce := new(connect.Error); errors.As(err, &ce) {
		return codes.Code(ce.Code())
	}
	return status.Code(err)
}

// unreachable reports whether err means no answer came from the machine,
// rather than a refusal by it.
func unreachable(err error) bool {
	switch codeOf(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// etcdAnswer is what one control plane says about the etcd cluster.
type etcdAnswer struct {
	// Members are the member host names; none when the node sees no
	// cluster.
	Members []string
	// NoCluster is set when the node answered that it knows of none.
	NoCluster bool
	Err       error
}

// noClusterMessages are the answers of EtcdMemberList on a control plane
// whose etcd has no data: no member was ever discovered, or etcd does not
// run on it. Every other answer may come from a node of a cluster.
var noClusterMessages = []string{"no controlplane endpoints discovered yet", "etcd is not running"}

// etcdMembers asks one control plane for the members of its etcd cluster.
func etcdMembers(ctx context.Context, c *client.Client) etcdAnswer {
	resp, err := c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	if err != nil {
		for _, m := range noClusterMessages {
			if strings.Contains(err.Error(), m) {
				return etcdAnswer{NoCluster: true}
			}
		}
		return etcdAnswer{Err: err}
	}
	var a etcdAnswer
	for _, msg := range resp.GetMessages() {
		for _, mem := range msg.GetMembers() {
			a.Members = append(a.Members, mem.GetHostname())
		}
	}
	a.NoCluster = len(a.Members) == 0
	return a
}
