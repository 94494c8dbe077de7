// Package talos renders what a Talos cluster needs from the Talos machinery
// library: the cluster's secrets bundle, one machine config per role with the
// operator's patches applied and validated, an admin kubeconfig and an admin
// talosconfig.
//
// The secrets bundle is the only source of randomness. GenerateSecrets makes
// it once per tenant; the caller keeps the bytes (in the tenant's TF state)
// and passes them back on every later call. MachineConfig is then a pure
// function of its input: the same ConfigInput gives byte-identical YAML, so a
// rendered workspace changes only when the declared cluster changes.
// Kubeconfig and Talosconfig issue a fresh client key on every call; their
// certificates are signed by the bundle's CAs, which never change.
//
// MachineConfig applies patches in exactly the order given and exactly as
// given. InputFor is the one place that decides which of a tenant's patches
// a node group gets and in which order, and builds the rest of the input
// from the loaded manifests. A patch that cannot be loaded, cannot be
// applied, or leaves a config that the Talos validator rejects comes back as
// a *PatchError that names the patch and where the manifests declare it. So
// does a patch after which a field that the secrets bundle owns (the CAs,
// the trustd and bootstrap tokens, the encryption secrets, the cluster's ID
// and secret) differs from the generated config: the server reaches the
// machines with the bundle's keys only.
// CheckMachineConfig reports the same errors without the YAML; it is the
// check of a fleet's validation, where configs that differ only in their
// tenant's name and endpoint share one encode-and-load round trip.
//
// # Version contracts
//
// A config renders for the version contract of its talosVersion, up to
// Talos 1.14 (newer ones are refused): the same input gives the config a
// node of that version expects. The 1.14 contract keeps the Kubernetes
// settings, CAs and keys in documents of their own (KubeletConfig,
// KubeAPIServerCAConfig, ...) instead of the v1alpha1 machine and cluster
// sections, so a patch for it sets those documents; the checks of the
// fields that the bundle owns read both layouts.
//
// # Hostnames
//
// With the Talos 1.12 contract the generated config carries a separate
// HostnameConfig document set to "auto: stable", and machine.network.hostname
// must stay empty. A caller that wants a static hostname patches that
// document, turning "auto" off in the same patch (HostnamePatch does this):
//
//	apiVersion: v1alpha1
//	kind: HostnameConfig
//	auto: "off"
//	hostname: web-1
//
// The package holds cluster keys in memory only. It must not write files,
// log rendered configs or secrets, or import the reconciler or the backend.
package talos
