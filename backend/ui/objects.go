package ui

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// decode decodes a stored object into into.
func decode(r store.Resource, into any) error {
	if err := json.Unmarshal(r.Object, into); err != nil {
		return fmt.Errorf("decode %s %q: %w", r.Kind, r.Name, err)
	}
	return nil
}

// tenantsOf decodes every tenant.
func tenantsOf(tx store.Tx) ([]schema.Tenant, error) {
	var out []schema.Tenant
	err := tx.Scan(schema.KindTenant, "", func(r store.Resource) error {
		var t schema.Tenant
		if err := decode(r, &t); err != nil {
			return err
		}
		out = append(out, t)
		return nil
	})
	return out, err
}

// objectsOf decodes the objects of kind that belong to tenant.
func objectsOf[T any](tx store.Tx, tenant, kind string) ([]T, error) {
	var out []T
	err := tx.TenantObjects(tenant, kind, func(r store.Resource) error {
		var v T
		if err := decode(r, &v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// commitRef is a stored commit's name and age, read without decoding it.
type commitRef struct {
	name    string
	created time.Time
	rv      uint64
}

// commitRefs lists every commit, newest first (by createdAt, then name),
// as the API lists them.
func commitRefs(tx store.Tx) ([]commitRef, error) {
	var refs []commitRef
	err := tx.Scan(schema.KindCommit, "", func(r store.Resource) error {
		t, err := r.CreatedAt()
		if err != nil {
			return err
		}
		refs = append(refs, commitRef{name: r.Name, created: t, rv: r.ResourceVersion})
		return nil
	})
	slices.SortStableFunc(refs, func(a, b commitRef) int { return b.created.Compare(a.created) })
	return refs, err
}

// commitSummary is what lists show of a commit: its spec and phase, the
// plan totals and the failed tenants, without the per-tenant detail.
type commitSummary struct {
	Name     string
	Spec     schema.CommitSpec
	Created  time.Time
	Phase    schema.CommitPhase
	Plan     schema.PlanSummary
	Tenants  int
	Failed   int
	Problems int
	Message  string
}

// summaryCache keeps commit summaries by commit name and resourceVersion:
// a commit that has not changed has the same summary, and most commits
// never change once they have finished. It is bounded; when full, it
// starts over.
type summaryCache struct {
	mu sync.Mutex
	m  map[summaryKey]commitSummary
}

type summaryKey struct {
	name string
	rv   uint64
}

// maxSummaries bounds the summary cache.
const maxSummaries = 4096

// summaries returns the summaries of the commits of refs, decoding those
// the cache does not have.
func (c *summaryCache) summaries(tx store.Tx, refs []commitRef) ([]commitSummary, error) {
	out := make([]commitSummary, 0, len(refs))
	for _, ref := range refs {
		key := summaryKey{ref.name, ref.rv}
		c.mu.Lock()
		s, ok := c.m[key]
		c.mu.Unlock()
		if !ok {
			r, err := tx.Get(schema.KindCommit, ref.name)
			if err != nil {
				return nil, err
			}
			if s, err = decodeSummary(r.Object); err != nil {
				return nil, fmt.Errorf("commit %s: %w", ref.name, err)
			}
			c.mu.Lock()
			if c.m == nil || len(c.m) >= maxSummaries {
				c.m = map[summaryKey]commitSummary{}
			}
			c.m[key] = s
			c.mu.Unlock()
		}
		out = append(out, s)
	}
	return out, nil
}

// decodeSummary returns the summary of the stored commit obj. A commit
// written with its totals (schema.CommitTotals, ahead of the tenants'
// results) is read only up to them; an older one is decoded whole.
func decodeSummary(obj []byte) (commitSummary, error) {
	var co summaryObj
	dec := json.NewDecoder(bytes.NewReader(obj))
	found, err := walkObject(dec, func(key string) (bool, error) {
		switch key {
		case "metadata":
			return false, dec.Decode(&co.Metadata)
		case "spec":
			return false, dec.Decode(&co.Spec)
		case "status":
			return walkObject(dec, func(key string) (bool, error) {
				switch key {
				case "phase":
					return false, dec.Decode(&co.Status.Phase)
				case "message":
					return false, dec.Decode(&co.Status.Message)
				case "totals":
					return true, dec.Decode(&co.Totals)
				case "tenants", "problems":
					return true, nil
				}
				return false, dec.Decode(&json.RawMessage{})
			})
		}
		return false, dec.Decode(&json.RawMessage{})
	})
	switch {
	case err != nil:
		return commitSummary{}, fmt.Errorf("decode: %w", err)
	case found && co.Totals != nil:
		return co.summary(), nil
	}
	co = summaryObj{}
	if err := json.Unmarshal(obj, &co); err != nil {
		return commitSummary{}, fmt.Errorf("decode: %w", err)
	}
	return co.summary(), nil
}

// walkObject reads the members of the JSON object that dec is at, calling
// member for each key with dec at its value; member consumes the value and
// says whether the walk is over. walkObject reports whether a member ended
// it.
func walkObject(dec *json.Decoder, member func(key string) (bool, error)) (bool, error) {
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false, errors.New("not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return false, err
		}
		key, _ := t.(string)
		done, err := member(key)
		if err != nil || done {
			return done, err
		}
	}
	_, err := dec.Token()
	return false, err
}

// summaryObj is the part of a stored commit that its summary needs; the
// rest is skipped when it is decoded.
type summaryObj struct {
	Metadata struct {
		Name      string    `json:"name"`
		CreatedAt time.Time `json:"createdAt"`
	} `json:"metadata"`
	Spec   schema.CommitSpec `json:"spec"`
	Status struct {
		Phase   schema.CommitPhase `json:"phase"`
		Message string             `json:"message"`
		Tenants []struct {
			Phase schema.CommitPhase `json:"phase"`
			Plan  schema.PlanSummary `json:"plan"`
		} `json:"tenants"`
		Problems []struct{} `json:"problems"`
	} `json:"status"`
	Totals *schema.CommitTotals `json:"-"` // from status.totals, when decodeSummary stopped there
}

func (c *summaryObj) summary() commitSummary {
	s := commitSummary{Name: c.Metadata.Name, Spec: c.Spec, Created: c.Metadata.CreatedAt, Phase: c.Status.Phase,
		Message: c.Status.Message}
	t := c.Totals
	if t == nil {
		st := schema.CommitStatus{Problems: make([]schema.Problem, len(c.Status.Problems))}
		for _, r := range c.Status.Tenants {
			st.Tenants = append(st.Tenants, schema.TenantResult{Phase: r.Phase, Plan: r.Plan})
		}
		sum := st.Sum()
		t = &sum
	}
	s.Tenants, s.Failed, s.Problems, s.Plan = t.Tenants, t.Failed, t.Problems, t.Plan
	return s
}

// byName sorts objects by name.
func byName[T any](xs []T, name func(*T) string) {
	slices.SortFunc(xs, func(a, b T) int { return cmp.Compare(name(&a), name(&b)) })
}

// tenantResult returns the result of tenant in the stored commit obj, by
// finding its JSON rather than decoding the whole commit, which holds a
// result for every tenant. The store writes commits with encoding/json
// from schema.Commit, so a result is an object that starts with its
// "tenant" member; a string that quotes one has its quotes escaped.
func tenantResult(obj []byte, tenant string) (schema.TenantResult, bool, error) {
	var res schema.TenantResult
	name, err := json.Marshal(tenant)
	if err != nil {
		return res, false, err
	}
	i := bytes.Index(obj, append(append([]byte(`{"tenant":`), name...), ','))
	if i < 0 {
		return res, false, nil
	}
	if err := json.NewDecoder(bytes.NewReader(obj[i:])).Decode(&res); err != nil {
		return res, false, fmt.Errorf("decode the result of %s: %w", tenant, err)
	}
	return res, true, nil
}
