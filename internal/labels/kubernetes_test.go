package labels

import (
	"strconv"
	"strings"
	"testing"

	k8s "k8s.io/apimachinery/pkg/labels"
)

// seeds are selectors for FuzzSelector, and TestAgreesWithKubernetes runs
// them as a plain test.
var seeds = []string{
	"", " ", "a", "!a", "a=b", "a==b", "a!=b", "a=", "a!=", "a>1", "a<10", "a>-1", "a>+1", "a>01", "a>1.5",
	"a>9223372036854775807", "a<9223372036854775808", "a>=1", "a=>1", "a!==b", "a===b", "a=!b",
	"a in (b,c)", "a notin (b,c)", "a in ()", "a in (,)", "a in (b,)", "a in (,b)", "a in (b,,c)", "a in (b c)",
	"a in b", "a in (b", "a in(b)", "ain(b)", "a notin(b),c", "in", "notin", "in in (in)", "!in", "in=notin",
	"a,b", "a,", ",a", "a,,b", "a=b,c!=d,!e,f in (g),h notin (i),j>0,k<0",
	"example.com/a=b", "Example.com/a", "/a", "a/", "a/b/c", "a.b-c_d=e.f-g_h", "-a", "a-", "_a", "a_",
	"a=-b", "a=b-", "a=b\x01", "a\x7f", "a=\u00e9", "\u00e9", "a=b\u00a0", "a=b\u2028", "a\vb", "a\f", "\ta\r\n=\nb ",
	"a  =  b", "a b", "!a=b", "!a,b", "!!a", "a!", "a)", "(a", "a=b)", "a=(b)", "a,b=c,,", "a=b,=c",
	strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("b", 253) + "/a", strings.Repeat("b", 254) + "/a",
	"a=" + strings.Repeat("v", 63), "a=" + strings.Repeat("v", 64),
}

// TestAgreesWithKubernetes runs the seeds of FuzzSelector.
func TestAgreesWithKubernetes(t *testing.T) {
	for _, s := range seeds {
		compare(t, s, "a=1,b=x")
	}
}

// FuzzSelector parses a selector with Parse and with Kubernetes'
// labels.Parse: both accept it or both refuse it, and an accepted one
// matches the same label sets in both.
func FuzzSelector(f *testing.F) {
	for _, s := range seeds {
		f.Add(s, "a=1,b=x")
	}
	f.Fuzz(compare)
}

func compare(t *testing.T, sel, labelList string) {
	if strings.IndexByte(sel, 0) >= 0 {
		return // refused here, read as the end of the selector by Kubernetes
	}
	ours, err := Parse(sel)
	theirs, kerr := k8s.Parse(sel)
	if (err == nil) != (kerr == nil) {
		t.Fatalf("Parse(%q): ours %v, Kubernetes %v", sel, err, kerr)
	}
	if err != nil {
		return
	}
	for _, ls := range labelSets(ours, labelList) {
		if got, want := ours.Matches(ls), theirs.Matches(k8s.Set(ls)); got != want {
			t.Fatalf("%q matches %v: ours %v, Kubernetes %v", sel, ls, got, want)
		}
	}
}

// labelSets returns label sets to match against: the fuzzed one, and for
// every requirement sets with its key absent, equal to each of its values,
// and near them as numbers.
func labelSets(sel Selector, list string) []map[string]string {
	given := map[string]string{}
	for _, kv := range strings.Split(list, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			given[k] = v
		}
	}
	out := []map[string]string{given, {}}
	for _, r := range sel {
		vals := append([]string{"", "x", "-5", "0", "9223372036854775807"}, r.Values...)
		for _, v := range r.Values {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				vals = append(vals, strconv.FormatInt(n-1, 10), strconv.FormatInt(n+1, 10), "0"+v)
			}
		}
		for _, v := range vals {
			ls := map[string]string{r.Key: v}
			for k, w := range given {
				ls[k] = w
			}
			ls[r.Key] = v
			out = append(out, ls)
		}
	}
	return out
}
