package reconciler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/redact"
	"github.com/rezuscloud/rezuscloud/schema"
)

// Values of the manifests that SOPS encrypted are decrypted at load
// (Options.Decrypt) and live in the loaded objects, in memory. They reach
// tofu only as the machine configs in the sensitive var file that exists
// while a plan runs. Everything else the reconciler keeps or shows is made
// from the objects' Redacted copies, where they read schema.EncryptedValue:
// the store's Tenants, NodeGroups and ConfigPatches (status.Recorder), the
// applied record's model and so every diff (prepare, finish), previews;
// and text that tools made from the decrypted objects (a render error, a
// Talos validation problem) goes through the tenant's scrubber. The input
// hash, which must change with the values, is keyed (inputHash).

// checkEncrypted refuses a tree with SOPS-encrypted files that were not
// decrypted (the server has no age key), at each such file, and encrypted
// values where they cannot stay secret (schema.CheckEncrypted).
func checkEncrypted(desired *schema.Desired, root string) []schema.Problem {
	if desired.Undecrypted == 0 {
		return schema.CheckEncrypted(desired)
	}
	const noKey = "this file is SOPS-encrypted, and this server has no age key to decrypt it (--sops-age-key-file)"
	var files []string
	add := func(src schema.Source) {
		if len(src.Encrypted) > 0 {
			files = append(files, src.File)
		}
	}
	for _, td := range desired.Tenants {
		add(td.Tenant.Source)
		for _, ng := range td.NodeGroups {
			add(ng.Source)
		}
		for _, p := range td.Patches {
			add(p.Source)
		}
	}
	slices.Sort(files)
	var probs []schema.Problem
	for _, f := range slices.Compact(files) {
		probs = append(probs, schema.Problem{File: f, Message: noKey})
	}
	if len(probs) < desired.Undecrypted {
		probs = append(probs, schema.Problem{File: root, Message: fmt.Sprintf(
			"%d manifest files are SOPS-encrypted, and this server has no age key to decrypt them (--sops-age-key-file)", desired.Undecrypted)})
	}
	return probs
}

// minScrubbed is the length under which a decrypted value (or a word of
// one) is not looked for in text: shorter ones would hide ordinary words.
const minScrubbed = 4

// scrubber returns what removes a tenant's decrypted values from text
// made from its objects: each reads schema.EncryptedValue, and whatever
// package redact recognises by its form goes too.
func scrubber(td *schema.TenantDesired) func(string) string {
	if td == nil || !td.Encrypted() {
		return redact.Text
	}
	vals := slices.DeleteFunc(td.EncryptedValues(), func(v string) bool { return len(v) < minScrubbed })
	slices.SortFunc(vals, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	pairs := make([]string, 0, 2*len(vals))
	for _, v := range slices.Compact(vals) {
		pairs = append(pairs, v, schema.EncryptedValue)
	}
	r := strings.NewReplacer(pairs...)
	return func(s string) string { return redact.Text(r.Replace(s)) }
}

// scrubProblems removes td's decrypted values from the messages of probs.
func scrubProblems(td *schema.TenantDesired, probs []schema.Problem) []schema.Problem {
	if td == nil || !td.Encrypted() {
		return probs
	}
	scrub := scrubber(td)
	for i := range probs {
		probs[i].Message = scrub(probs[i].Message)
	}
	return probs
}
