package schema

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// TenantResults are a commit's per-tenant results. A commit of a large
// fleet holds thousands of them and is written several times while it
// runs, so they encode without reflection, into the same bytes as
// encoding/json gives for a []TenantResult.
type TenantResults []TenantResult

// MarshalJSON encodes the results as encoding/json encodes a
// []TenantResult: null when nil, else an array of objects with the fields
// in their declared order.
func (rs TenantResults) MarshalJSON() ([]byte, error) {
	if rs == nil {
		return []byte("null"), nil
	}
	b := make([]byte, 0, 160*len(rs)+2)
	b = append(b, '[')
	for i := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = rs[i].appendJSON(b); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// appendJSON appends the result's JSON object to b.
func (r *TenantResult) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"tenant":`...)
	b = appendJSONString(b, r.Tenant)
	b = append(b, `,"phase":`...)
	b = appendJSONString(b, string(r.Phase))
	b = append(b, `,"plan":{"add":`...)
	b = strconv.AppendInt(b, int64(r.Plan.Add), 10)
	b = append(b, `,"change":`...)
	b = strconv.AppendInt(b, int64(r.Plan.Change), 10)
	b = append(b, `,"destroy":`...)
	b = strconv.AppendInt(b, int64(r.Plan.Destroy), 10)
	if m := r.Plan.Machines; m != (PlanCounts{}) {
		b = append(b, `,"machines":{"add":`...)
		b = strconv.AppendInt(b, int64(m.Add), 10)
		b = append(b, `,"change":`...)
		b = strconv.AppendInt(b, int64(m.Change), 10)
		b = append(b, `,"destroy":`...)
		b = strconv.AppendInt(b, int64(m.Destroy), 10)
		b = append(b, '}')
	}
	b = append(b, '}')
	if r.Plane != nil {
		v, err := json.Marshal(r.Plane)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"plane":`...)
		b = append(b, v...)
	}
	b = appendStringField(b, "error", r.Error)
	b = appendStringField(b, "reason", r.Reason)
	if r.Stalled {
		b = append(b, `,"stalled":true`...)
	}
	var err error
	if !r.NextAttemptAt.IsZero() {
		if b, err = appendTimeField(b, "nextAttemptAt", r); err != nil {
			return nil, err
		}
	}
	b = appendStringField(b, "waiting", r.Waiting)
	b = appendStringField(b, "outputTail", r.OutputTail)
	for _, f := range []string{"startedAt", "finishedAt"} {
		if b, err = appendTimeField(b, f, r); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendStringField appends ,"name":"s" unless s is empty (omitempty).
func appendStringField(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendJSONString(b, s)
}

// appendTimeField appends one of the result's time fields, unless it is
// zero (omitzero), as time.Time's MarshalJSON gives it.
func appendTimeField(b []byte, name string, r *TenantResult) ([]byte, error) {
	t := r.StartedAt
	switch name {
	case "nextAttemptAt":
		t = r.NextAttemptAt
	case "finishedAt":
		t = r.FinishedAt
	}
	if t.IsZero() {
		return b, nil
	}
	v, err := t.MarshalJSON()
	if err != nil {
		return nil, err
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return append(b, v...), nil
}

// appendJSONString appends s as encoding/json quotes it. Plain printable
// ASCII is copied; anything else goes through encoding/json, which
// escapes HTML characters, control characters, U+2028 and U+2029, and
// replaces invalid UTF-8.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			v, _ := json.Marshal(s)
			return append(b, v...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
