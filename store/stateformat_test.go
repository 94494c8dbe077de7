package store

import (
	"encoding/json"
	"testing"
)

// FuzzParseState checks ParseState against encoding/json, which tofu and
// terraform read states with: whatever ParseState accepts decodes there,
// with the same serial and lineage; and it never panics.
func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"version":4,"terraform_version":"1.10.10","serial":3,"lineage":"lin","outputs":{},"resources":[]}`))
	f.Add([]byte(`{"serial":2,"lineage":"l","encrypted_data":"eA==","encryption_version":"v0"}`))
	f.Add([]byte(`{"version":4,"serial":1,"lineage":"a","LINEAGE":"b","Serial":7}`))
	f.Add([]byte(`{"version":4,"serial":1,"lineage":"a\u0041","x":[{"y":"}]"}]}`))
	f.Add([]byte(`{"version":4,"serial":1e3,"lineage":"a"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		serial, lineage, err := ParseState(body)
		if err != nil {
			return
		}
		var std struct {
			Version *uint64 `json:"version"`
			Serial  *uint64 `json:"serial"`
			Lineage string  `json:"lineage"`
		}
		if err := json.Unmarshal(body, &std); err != nil {
			// encrypted states may carry a version of another type
			var enc struct {
				Serial  *uint64 `json:"serial"`
				Lineage string  `json:"lineage"`
			}
			if err := json.Unmarshal(body, &enc); err != nil {
				t.Fatalf("ParseState accepted %q, which encoding/json refuses: %v", body, err)
			}
			std.Serial, std.Lineage = enc.Serial, enc.Lineage
		}
		if std.Serial == nil || *std.Serial != serial || std.Lineage != lineage {
			t.Fatalf("ParseState(%q) = serial %d lineage %q; encoding/json reads %v %q", body, serial, lineage, std.Serial, std.Lineage)
		}
	})
}
