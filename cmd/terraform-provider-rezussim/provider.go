package main

import (
	"context"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/rezuscloud/rezuscloud/internal/sim"
)

// dirEnv names the environment variable that gives the machine directory
// when the provider block does not.
const dirEnv = "REZUSSIM_DIR"

type simProvider struct {
	build string
}

var _ provider.Provider = (*simProvider)(nil)

func newProvider(build string) func() provider.Provider {
	return func() provider.Provider { return &simProvider{build: build} }
}

type providerModel struct {
	Dir types.String `tfsdk:"dir"`
}

func (p *simProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "rezussim"
	resp.Version = p.build
}

func (p *simProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A simulated cloud: machines are JSON files in a directory.",
		Attributes: map[string]schema.Attribute{
			"dir": schema.StringAttribute{
				Description: "Directory that holds the machine files (created 0700). Defaults to $" + dirEnv + ".",
				Optional:    true,
			},
		},
	}
}

func (p *simProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var m providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if m.Dir.IsUnknown() {
		return // known only after apply; resources report the missing store if used
	}
	dir := m.Dir.ValueString()
	if dir == "" {
		dir = os.Getenv(dirEnv)
	}
	if dir == "" {
		resp.Diagnostics.AddError("No machine directory",
			"The rezussim provider needs a directory for its machine files: set `dir` in the provider block or the "+dirEnv+" environment variable.")
		return
	}
	store, err := sim.Open(dir)
	if err != nil {
		resp.Diagnostics.AddError("Cannot open machine directory", err.Error())
		return
	}
	resp.ResourceData = store
}

func (p *simProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newMachineResource}
}

func (p *simProvider) DataSources(context.Context) []func() datasource.DataSource {
	return nil
}
