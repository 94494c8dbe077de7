package talos

import (
	"strconv"
)

// HostnamePatch returns a patch that gives a machine the static hostname
// hostname instead of the automatic one: it sets the HostnameConfig
// document that Talos 1.12 and later generate, turning "auto" off. Configs
// for older Talos versions set machine.network.hostname instead.
func HostnamePatch(hostname string) Patch {
	return Patch{
		Name: "hostname",
		Patch: "apiVersion: v1alpha1\n" +
			"kind: HostnameConfig\n" +
			"auto: \"off\"\n" +
			"hostname: " + strconv.Quote(hostname) + "\n",
	}
}
