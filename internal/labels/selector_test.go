package labels

import (
	"strings"
	"testing"
)

func TestMatches(t *testing.T) {
	lbl := map[string]string{"rezuscloud.io/tenant": "prod", "rezuscloud.io/role": "worker", "tier": "a", "count": "3", "big": "9223372036854775808"}
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
		{"count>2", true},
		{"count>3", false},
		{"count<4", true},
		{"count<3", false},
		{"tier>0", false},
		{"missing<100", false},
		{"big<9223372036854775807", false},
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
		"a=b=c":          `at offset 3: "=" after requirement "a"`,
		"role in worker": "parenthesised list",
		"bad key=x":      `"key" after key "bad"`,
		"Bad_Key-=x":     `"Bad_Key-" is not a valid label key`,
		"a b c":          `"b" after key "a"`,
		",":              "empty requirement at offset 0",
		"a=b,":           "empty requirement at offset 4",
		"-x":             `"-x" is not a valid label key`,
		"a in (b c)":     `"c" in the values of in`,
		"a in (b,-c)":    `"-c" is not a valid label value`,
		"x>a":            `"x" > "a": the value must be a whole number`,
		"x<-1":           `"-1" is not a valid label value`,
		"!x=y":           `"=" after requirement "x"`,
		"a\x00=b":        "NUL byte at offset 1",
	}
	for sel, want := range cases {
		_, err := Parse(sel)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want error containing %q", sel, err, want)
		}
	}
}

// TestParseLikeKubernetes pins what Kubernetes accepts and refuses where
// this parser once differed from it.
func TestParseLikeKubernetes(t *testing.T) {
	long := strings.Repeat("a", 63)
	prefix := strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 63) + "." + strings.Repeat("e", 61)
	for sel, ok := range map[string]bool{
		"x>1":                 true,
		"env<10":              true,
		"x > 1 , y < 2":       true,
		"x>=1":                false,
		long:                  true,
		long + "a":            false,
		prefix + "/k":         true, // a prefix of 253
		prefix + "e/k":        false,
		"example.com/" + long: true,
		"Example.com/k":       false,
		"/k":                  false,
		"a/b/c":               false,
		"k=" + long:           true,
		"k=" + long + "a":     false,
		"k=\u00e9":            false,
		"\u00e9=x":            false,
		"k=v\u00a0":           false, // no-break space is no blank
		"k=v\v":               false,
		"\fk=v":               false,
		" \t\r\nk=v \t\r\n":   true,
		"k in (a,,b)":         true,
		"k in (),x notin (,)": true,
		"in=in,notin in (in)": true,
		"k==v,k!=w":           true,
		"k=":                  true,
		"k!=":                 true,
		"k in":                false,
		"k notin (a":          false,
		"!":                   false,
		"k=(":                 false,
	} {
		if _, err := Parse(sel); (err == nil) != ok {
			t.Errorf("Parse(%q): %v, want accepted %v", sel, err, ok)
		}
	}
}
