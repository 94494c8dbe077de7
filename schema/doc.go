// Package schema defines the resource kinds of RezusCloud and turns a tree of
// manifests into the desired state.
//
// It holds the Go types of every kind (Tenant, NodeGroup and ConfigPatch, which
// operators declare in git, and Machine, Provider and Commit, which only the API
// serves), the JSON Schemas of the declarable kinds (embedded in the binary,
// see Files, and kept as plain files for editors), and Load, which reads a tree
// of YAML manifests, validates it and returns either the complete desired state
// or every problem it found, each with file, line, column and JSON path.
//
// It is also the one home of the names the other packages share: the labels
// (LabelTenant, LabelNodeGroup, …), the table of served kinds (Kinds,
// LookupKind) with the one rule of which tenant an object belongs to
// (TenantOf), the names of Commits (CommitName) and PlanSummary.
//
// Load never returns a partial desired state: a tree with any problem yields no
// desired state at all, so that a typing mistake can never look like the
// deletion of what it was meant to declare.
//
// # Manifest rules
//
// Beyond its JSON Schema, Load holds manifests to these rules:
//
//   - Files: every *.yaml and *.yml under the root, in sorted path order.
//     Names starting with "." (files and directories, such as .git) are
//     skipped. Symbolic links are never followed: one with a manifest's name,
//     or one to a directory, is a problem, worded differently when it leaves
//     the tree. Other non-regular files with a manifest's name are problems,
//     and are never opened. An empty file, or one of only comments, is a
//     problem: it is more likely a truncated write than an intent. The path
//     of a manifest file must be valid UTF-8 without control characters;
//     a problem says which character is wrong and where, and shows the
//     path with Go escapes (bad\x01.yaml).
//   - Documents: a file may hold several, separated by "---". Every document
//     needs an apiVersion. Documents of other apiVersions are skipped
//     and counted; Tenant, NodeGroup or ConfigPatch under another apiVersion,
//     any other rezuscloud.io version, and an unknown kind under
//     rezuscloud.io/v1 are problems, each with its own message.
//   - YAML: UTF-8 only; tabs in indentation, duplicate keys and keys that are
//     not strings are problems. Aliases and merge keys (<<) work, but may
//     expand a file by at most 10,000 nodes beyond those written in it, which
//     stops "billion laughs" documents at once.
//   - Names are DNS-1123 labels. Tenant names are unique; node group and
//     config patch names are unique within their tenant, and so are the
//     names in a spec.configPatches list.
//   - Versions (kubernetesVersion, talosVersion) are x.y.z with an optional
//     leading "v", which Load drops.
//   - podNetwork and serviceNetwork hold CIDRs whose host bits are zero and
//     none of which overlaps another; Load writes them in canonical form.
//   - controlPlaneEndpoint is an https URL with a port and nothing after it.
//   - A patch is YAML text (one or more documents, each a mapping or a list)
//     or a mapping written in place, which Load turns into YAML text with
//     sorted keys.
//   - Limits (Options): 1 MiB per file, 64 MiB per tree, nesting 100 deep.
//     At most 100 problems are reported per file, with a count of the rest.
//   - SOPS: a file whose documents carry a top-level "sops" key is
//     SOPS-encrypted. With Options.Decrypt it is validated decrypted, at the
//     lines of the file as committed, and no problem tells a decrypted value;
//     each object's Source.Encrypted lists its encrypted values under /spec.
//     Without it the file is checked but for its encrypted values, which read
//     EncryptedValue, and Desired.Undecrypted counts it (see sops.go).
//
// # Caching
//
// With Options.Cache, Load keeps what each file yielded (its documents,
// with their positions, and its problems) keyed by the file's path and a
// hash of its content, and parses and validates only the files whose
// content changed since. The hash is the one the file system knows
// (ContentHasher: a git tree's blob hash, so an unchanged file is not even
// read), or else the SHA-256 of the bytes read. The checks across files
// (unique names, tenants that exist) run on every Load, on all documents.
// A file that is gone is never served from the cache: only the files found
// in the tree are looked up. A directory whose tree hash the file system
// knows (TreeHasher) and which is unchanged since a Load that found no
// problem in it is not walked again: its files come from the cache's
// listing of it. With a CacheStore (Cache.UseStore), what was parsed
// outlives the process; files with problems, and SOPS-encrypted files,
// are never stored. Entries made with another Options.Decrypt are dropped.
//
// The package knows nothing of what happens to the desired state afterwards: it
// must not import sources, render, reconciler or backend.
package schema
