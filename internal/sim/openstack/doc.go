// Package openstack is a simulated OpenStack cloud: an HTTP server that
// speaks enough of Keystone v3, Nova (compute v2.1), Neutron and Glance for
// the real terraform-provider-openstack to create, read, update and delete
// servers, ports and server groups, and to look up images, flavors,
// networks and security groups.
//
// It behaves like a small, fast cloud:
//
//   - every server is ACTIVE on its first read (the provider waits 3 s and
//     more between reads of a server that is still building);
//   - every fixed IP it hands out lies in one loopback block (127.2.0.0/16
//     unless configured), so that whatever dials a machine stays on this
//     host;
//   - its servers, ports and server groups live in a directory and survive a
//     restart; a server's user data is never written there, only its
//     SHA-256;
//   - every request is journaled (method, path, status), in memory and in
//     journal.log of its directory;
//   - faults can be injected from Go or, for a server running in another
//     process, by dropping a faults.json into its directory.
//
// A Hook hears of every server that boots and of every server deleted, with
// the user data it was created with (and, for a ServerHook, its flavor),
// so that a machine simulation can boot it. The package holds no real credentials: the ones it checks are those it
// was configured with. It must not import anything else of the project.
package openstack
