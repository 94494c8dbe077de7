package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/rezuscloud/rezuscloud/internal/sim"
)

type machineResource struct {
	store *sim.Store
}

var (
	_ resource.ResourceWithConfigure   = (*machineResource)(nil)
	_ resource.ResourceWithImportState = (*machineResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*machineResource)(nil)
)

func newMachineResource() resource.Resource { return &machineResource{} }

type machineModel struct {
	ID        types.String `tfsdk:"id"`
	Name      types.String `tfsdk:"name"`
	Tenant    types.String `tfsdk:"tenant"`
	NodeGroup types.String `tfsdk:"node_group"`
	Role      types.String `tfsdk:"role"`
	Shape     types.String `tfsdk:"shape"`
	Image     types.String `tfsdk:"image"`
	UserData  types.String `tfsdk:"user_data"`
	Address   types.String `tfsdk:"address"`
	Hostname  types.String `tfsdk:"hostname"`
	UserHash  types.String `tfsdk:"user_data_hash"`
	// KubeAPI is null unless set, so that machines made before the
	// attribute existed plan no change.
	KubeAPI types.Bool `tfsdk:"kubernetes_api"`
}

func (r *machineResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_machine"
}

func (r *machineResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	label := func(what string) []validator.String {
		return []validator.String{check{"a DNS label", func(s string) error { return sim.CheckLabel(what, s) }}}
	}
	nonEmpty := []validator.String{check{"not empty", func(s string) error {
		if s == "" {
			return errors.New("must not be empty")
		}
		return nil
	}}}
	resp.Schema = schema.Schema{
		Description: "A simulated machine, kept as a JSON file in the provider's directory, with its disk beside it.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Description: `Machine id, "sim-" and 16 hex digits.`, Computed: true, PlanModifiers: keep,
			},
			"name": schema.StringAttribute{
				Description: "Machine name (a DNS subdomain).", Required: true, PlanModifiers: replace,
				Validators: []validator.String{check{"a DNS subdomain", func(s string) error { return sim.CheckName("name", s) }}},
			},
			"tenant": schema.StringAttribute{
				Description: "Tenant (cluster) the machine belongs to.", Required: true, PlanModifiers: replace, Validators: label("tenant"),
			},
			"node_group": schema.StringAttribute{
				Description: "Node group the machine belongs to.", Required: true, PlanModifiers: replace, Validators: label("node_group"),
			},
			"role": schema.StringAttribute{
				Description: `"controlplane" or "worker".`, Required: true, PlanModifiers: replace,
				Validators: []validator.String{check{`"controlplane" or "worker"`, sim.CheckRole}},
			},
			"shape": schema.StringAttribute{
				Description: "Machine size; changes in place.", Required: true, Validators: nonEmpty,
			},
			"kubernetes_api": schema.BoolAttribute{
				Description: "Run a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) for the machine's cluster at its control plane endpoint, once a control plane is bootstrapped; changes in place.",
				Optional:    true,
			},
			"image": schema.StringAttribute{
				Description: "Boot image.", Required: true, PlanModifiers: replace, Validators: nonEmpty,
			},
			"user_data": schema.StringAttribute{
				Description: "Data the machine boots with (its Talos config). It is written to the machine's disk (disk/<id>/user-data, mode 0600); the machine file keeps only its SHA-256.",
				Optional:    true, Sensitive: true, PlanModifiers: replace,
			},
			"address": schema.StringAttribute{
				Description: "Loopback IPv4 address from the sim dir's block 127.B.0.0/16, fixed for the machine's life; its Talos API listens there on port 50000.", Computed: true, PlanModifiers: keep,
			},
			"hostname": schema.StringAttribute{
				Description: "Host name: <tenant>-<node_group>-<last 6 hex digits of id>.", Computed: true, PlanModifiers: keep,
			},
			"user_data_hash": schema.StringAttribute{
				Description: "Hex SHA-256 of the user data the machine booted with, as its machine file records it. " +
					"Known at plan time; a machine whose file records another hash than the configured user_data's is replaced.",
				Computed: true,
			},
		},
	}
}

func (r *machineResource) Configure(_ context.Context, req resource.ConfigureRequest, _ *resource.ConfigureResponse) {
	if s, ok := req.ProviderData.(*sim.Store); ok {
		r.store = s
	}
}

// ready reports whether the provider was configured with a machine directory.
func (r *machineResource) ready(add func(string, string)) bool {
	if r.store == nil {
		add("Provider not configured", "The rezussim provider has no machine directory: set `dir` or "+dirEnv+".")
		return false
	}
	return true
}

func (r *machineResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m machineModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !r.ready(resp.Diagnostics.AddError) {
		return
	}
	if err := r.store.TakeFault(); err != nil {
		resp.Diagnostics.AddError("Cannot create machine", err.Error())
		return
	}
	if err := r.store.WaitCreate(ctx); err != nil {
		resp.Diagnostics.AddError("Cannot create machine", err.Error())
		return
	}
	rec, err := r.store.Create(sim.Spec{
		Name:          m.Name.ValueString(),
		Tenant:        m.Tenant.ValueString(),
		NodeGroup:     m.NodeGroup.ValueString(),
		Role:          m.Role.ValueString(),
		Shape:         m.Shape.ValueString(),
		Image:         m.Image.ValueString(),
		UserData:      []byte(m.UserData.ValueString()),
		KubernetesAPI: m.KubeAPI.ValueBool(),
	}, time.Now())
	if err != nil {
		resp.Diagnostics.AddError("Cannot create machine", err.Error())
		return
	}
	m.fromRecord(rec)
	// The machine exists from here on, as in a real cloud while the
	// instance boots: until Create returns, only the machine file knows it.
	if err := createDelay(ctx); err != nil {
		resp.Diagnostics.AddError("Cannot create machine", err.Error())
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// createDelayEnv names the environment variable that makes every machine
// creation take that long after the machine file is written (a Go
// duration): a knob for tests of interrupted applies.
const createDelayEnv = "REZUSSIM_CREATE_DELAY"

func createDelay(ctx context.Context) error {
	v := os.Getenv(createDelayEnv)
	if v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("%s=%q: want a duration such as 5s", createDelayEnv, v)
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *machineResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var m machineModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !r.ready(resp.Diagnostics.AddError) {
		return
	}
	rec, err := r.store.Get(m.ID.ValueString())
	if errors.Is(err, sim.ErrNotFound) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read machine", err.Error())
		return
	}
	m.fromRecord(rec)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *machineResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var m machineModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !r.ready(resp.Diagnostics.AddError) {
		return
	}
	if err := r.store.TakeFault(); err != nil {
		resp.Diagnostics.AddError("Cannot update machine", err.Error())
		return
	}
	rec, err := r.store.SetShape(m.ID.ValueString(), m.Shape.ValueString(), m.KubeAPI.ValueBool(), time.Now())
	if err != nil {
		resp.Diagnostics.AddError("Cannot update machine", err.Error())
		return
	}
	m.fromRecord(rec)
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func (r *machineResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m machineModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() || !r.ready(resp.Diagnostics.AddError) {
		return
	}
	if err := r.store.TakeFault(); err != nil {
		resp.Diagnostics.AddError("Cannot delete machine", err.Error())
		return
	}
	if err := r.store.Delete(m.ID.ValueString()); err != nil {
		resp.Diagnostics.AddError("Cannot delete machine", err.Error())
		return
	}
	sim.WaitGone(ctx, m.Address.ValueString(), deleteWait)
}

// deleteWait bounds how long a delete waits for the machine to stop
// answering (see sim.WaitGone).
const deleteWait = 5 * time.Second

// ModifyPlan plans user_data_hash from the configured user_data, so that a
// plan shows it, and replaces a machine whose file records a different hash
// (its file was changed, or it was imported).
func (r *machineResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	var userData types.String
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("user_data"), &userData)...)
	if resp.Diagnostics.HasError() || userData.IsUnknown() {
		return
	}
	hash := types.StringValue(sim.HashUserData([]byte(userData.ValueString())))
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("user_data_hash"), hash)...)
	if req.State.Raw.IsNull() {
		return // create
	}
	var booted types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("user_data_hash"), &booted)...)
	if !booted.Equal(hash) {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("user_data_hash"))
	}
}

// ImportState adopts an existing machine file by id. The user data is not
// known from the file, so a configuration that sets user_data plans a
// replacement of an imported machine.
func (r *machineResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

// fromRecord copies everything the machine file knows into m; user_data
// stays as it is.
func (m *machineModel) fromRecord(rec sim.Record) {
	m.ID = types.StringValue(rec.ID)
	m.Name = types.StringValue(rec.Name)
	m.Tenant = types.StringValue(rec.Tenant)
	m.NodeGroup = types.StringValue(rec.NodeGroup)
	m.Role = types.StringValue(rec.Role)
	m.Shape = types.StringValue(rec.Shape)
	m.Image = types.StringValue(rec.Image)
	m.Address = types.StringValue(rec.Address)
	m.Hostname = types.StringValue(rec.Hostname)
	m.UserHash = types.StringValue(rec.UserDataSHA256)
	if rec.KubernetesAPI {
		m.KubeAPI = types.BoolValue(true)
	} else if !m.KubeAPI.IsNull() {
		m.KubeAPI = types.BoolValue(false)
	}
}

// check is a string validator built from a function that returns an error
// for a bad value.
type check struct {
	desc string
	fn   func(string) error
}

func (c check) Description(context.Context) string         { return "must be " + c.desc }
func (c check) MarkdownDescription(context.Context) string { return "must be " + c.desc }

func (c check) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if err := c.fn(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid "+req.Path.String(), err.Error())
	}
}
