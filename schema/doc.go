// Package schema defines the resource kinds of RezusCloud and turns a tree of
// manifests into the desired state.
//
// It holds the Go types of every kind (Tenant, NodeGroup and ConfigPatch, which
// operators declare in git, and Machine, Provider and Commit, which only the API
// serves), the JSON Schemas of the declarable kinds (embedded in the binary and
// kept as plain files for editors), and Load, which reads a tree of YAML
// manifests, validates it and returns either the complete desired state or every
// problem it found, each with file, line, column and JSON path.
//
// Load never returns a partial desired state: a tree with any problem yields no
// desired state at all, so that a typing mistake can never look like the
// deletion of what it was meant to declare.
//
// The package knows nothing of what happens to the desired state afterwards: it
// must not import sources, render, reconciler or backend.
package schema
