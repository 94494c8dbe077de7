package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/modeldiff"
	"github.com/rezuscloud/rezuscloud/internal/sopsfile"
	"github.com/rezuscloud/rezuscloud/schema"
)

// SOPS-encrypted manifests in rezusctl: they are decrypted with the user's
// age key (sopsfile.FromEnvironment), and nothing the command prints shows
// a decrypted value: it reads schema.EncryptedValue.

// noteUndecrypted says on w that n encrypted files were checked without
// their encrypted values.
func noteUndecrypted(w io.Writer, n int) {
	if n == 0 {
		return
	}
	files := "files were"
	if n == 1 {
		files = "file was"
	}
	fmt.Fprintf(w, "%d encrypted %s checked without their encrypted values: no age key (%s)\n", n, files, sopsfile.EnvKeyFile)
}

// encryptedValues are the encrypted values of a loaded tree: where each
// is, and the decrypted text of those that are strings.
type encryptedValues struct {
	at      []encryptedAt
	secrets []string // longest first
}

type encryptedAt struct {
	file, kind, name string
	ptr              string // under the object, "/spec/..."
}

// encryptedValuesOf collects the encrypted values of desired's objects.
func encryptedValuesOf(desired *schema.Desired) *encryptedValues {
	ev := &encryptedValues{}
	add := func(kind, name string, obj any, src schema.Source) {
		if len(src.Encrypted) == 0 {
			return
		}
		var v any
		if b, err := json.Marshal(obj); err == nil {
			_ = json.Unmarshal(b, &v)
		}
		for _, ptr := range src.Encrypted {
			ev.at = append(ev.at, encryptedAt{src.File, kind, name, ptr})
			if s, ok := valueAt(v, ptr).(string); ok && s != schema.EncryptedValue {
				ev.secrets = append(ev.secrets, s)
			}
		}
	}
	for _, td := range desired.Tenants {
		add(schema.KindTenant, "", td.Tenant, td.Tenant.Source)
		for _, ng := range td.NodeGroups {
			add(schema.KindNodeGroup, ng.Metadata.Name, ng, ng.Source)
		}
		for _, p := range td.Patches {
			add(schema.KindConfigPatch, p.Metadata.Name, p, p.Source)
		}
	}
	slices.SortStableFunc(ev.secrets, func(a, b string) int { return len(b) - len(a) })
	return ev
}

// valueAt returns the value at a JSON pointer of a JSON value, or nil.
func valueAt(v any, ptr string) any {
	for _, tok := range strings.Split(ptr, "/")[1:] {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// scrub returns s with every decrypted value, as written and as JSON
// writes it, read schema.EncryptedValue. Values shorter than four bytes
// are left: they would hide ordinary words.
func (ev *encryptedValues) scrub(s string) string {
	for _, secret := range ev.secrets {
		forms := []string{secret}
		if b, err := json.Marshal(secret); err == nil {
			forms = append(forms, string(b[1:len(b)-1]))
		}
		for _, f := range forms {
			if len(f) >= 4 {
				s = strings.ReplaceAll(s, f, schema.EncryptedValue)
			}
		}
	}
	return s
}

// told returns the problems the provider modules found as the schema tells
// those of encrypted values: decrypted, without the values in their
// messages; not decrypted, none at or under such a value (it reads
// <encrypted>, which is not the problem).
func (ev *encryptedValues) told(probs []schema.Problem, decrypted bool) []schema.Problem {
	if len(ev.at) == 0 {
		return probs
	}
	if decrypted {
		for i := range probs {
			probs[i].Message = ev.scrub(probs[i].Message)
		}
		return probs
	}
	return slices.DeleteFunc(probs, func(p schema.Problem) bool {
		return slices.ContainsFunc(ev.at, func(e encryptedAt) bool {
			return e.file == p.File && (p.Path == e.ptr || strings.HasPrefix(p.Path, e.ptr+"/"))
		})
	})
}

// mask hides the encrypted values in a tenant's model changes: a field at
// or under an encrypted value of the local object shows its new value as
// schema.EncryptedValue, and is left out when the server shows the applied
// one as that too, since neither side's value can be compared.
func (ev *encryptedValues) mask(changes []modeldiff.ObjectChange, local *schema.TenantDesired) []modeldiff.ObjectChange {
	if local == nil {
		return changes
	}
	for i := range changes {
		c := &changes[i]
		src, ok := sourceOf(local, c.Kind, c.Name)
		if !ok || len(src.Encrypted) == 0 {
			continue
		}
		fields := c.Fields[:0]
		for _, fc := range c.Fields {
			path := "/spec" + fc.Path
			if slices.ContainsFunc(src.Encrypted, func(ptr string) bool { return path == ptr || strings.HasPrefix(path, ptr+"/") }) {
				if fc.Old == schema.EncryptedValue {
					continue
				}
				if fc.New != nil {
					fc.New = schema.EncryptedValue
				}
			}
			fields = append(fields, fc)
		}
		c.Fields = fields
	}
	return slices.DeleteFunc(changes, func(c modeldiff.ObjectChange) bool {
		return c.Action == modeldiff.ActionUpdate && len(c.Fields) == 0
	})
}

// sourceOf returns the Source of a local object by kind and name.
func sourceOf(td *schema.TenantDesired, kind, name string) (schema.Source, bool) {
	switch kind {
	case schema.KindTenant:
		return td.Tenant.Source, true
	case schema.KindNodeGroup:
		for _, ng := range td.NodeGroups {
			if ng.Metadata.Name == name {
				return ng.Source, true
			}
		}
	case schema.KindConfigPatch:
		for _, p := range td.Patches {
			if p.Metadata.Name == name {
				return p.Source, true
			}
		}
	}
	return schema.Source{}, false
}
