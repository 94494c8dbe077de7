package labels

import (
	"strings"
	"testing"
)

func TestMatches(t *testing.T) {
	lbl := map[string]string{"rezuscloud.io/tenant": "prod", "rezuscloud.io/role": "worker", "tier": "a"}
	cases := []struct {
		sel  string
		want bool
	}{
		{"", true},
		{"rezuscloud.io/tenant=prod", true},
		{"rezuscloud.io/tenant==prod", true},
		{"rezuscloud.io/tenant=staging", false},
		{"rezuscloud.io/tenant!=staging", true},
		{"rezuscloud.io/tenant!=prod", false},
		{"missing!=x", true},
		{"rezuscloud.io/role in (worker,controlplane)", true},
		{"rezuscloud.io/role in (controlplane)", false},
		{"rezuscloud.io/role notin (controlplane)", true},
		{"rezuscloud.io/role notin (worker)", false},
		{"missing notin (x)", true},
		{"tier", true},
		{"missing", false},
		{"!missing", true},
		{"!tier", false},
		{"rezuscloud.io/tenant=prod, rezuscloud.io/role in (worker), !missing", true},
		{"rezuscloud.io/tenant=prod,tier=b", false},
	}
	for _, c := range cases {
		sel, err := Parse(c.sel)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.sel, err)
			continue
		}
		if got := sel.Matches(lbl); got != c.want {
			t.Errorf("%q matches = %v, want %v", c.sel, got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		"a=b=c":          `"b=c" is not a valid label value`,
		"role in worker": "parenthesised list",
		"bad key=x":      `"bad key" is not a valid label key`,
		"a b c":          "is not a requirement",
		",":              "empty requirement",
		"-x":             `"-x" is not a valid label key`,
		"a in (b c)":     `"b c" is not a valid label value`,
	}
	for sel, want := range cases {
		_, err := Parse(sel)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want error containing %q", sel, err, want)
		}
	}
}
