// Command terraform-provider-rezussim is the provider of RezusCloud's
// simulated cloud: its one resource, rezussim_machine, keeps each machine as
// a JSON record in a directory (see internal/sim), writes the machine's
// user data to the machine's own disk there, and hands out loopback
// addresses from the directory's block 127.B.0.0/16. The node host of the
// sim dir then serves each machine as a simulated Talos node. It is the
// built-in default cloud and the test bed of the end-to-end tests. tofu
// starts it; it is not run by hand.
//
// It must not import anything of the project but internal/sim.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/rezuscloud/rezuscloud/internal/sim"
)

// build names the build; `go build -ldflags "-X main.build=..."` sets it.
// The provider version tofu sees comes from the mirror directory, which
// scripts/install-provider.sh derives from the binary's content.
var build = "dev"

func main() {
	debug := flag.Bool("debug", false, "serve for a debugger (prints TF_REATTACH_PROVIDERS)")
	flag.Parse()
	err := providerserver.Serve(context.Background(), newProvider(build), providerserver.ServeOpts{
		Address:         sim.ProviderSource,
		Debug:           *debug,
		ProtocolVersion: 6,
	})
	if err != nil {
		log.Fatal(err)
	}
}
