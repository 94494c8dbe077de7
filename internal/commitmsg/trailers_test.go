package commitmsg

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// parseCases are messages and their trailers as git parses them.
var parseCases = []struct {
	name string
	msg  string
	want Trailers
}{
	{"subject line is never a trailer", "Rezuscloud-Allow-Deletions: 2", nil},
	{"subject line with newline", "Rezuscloud-Allow-Deletions: 2\n", nil},
	{"subject paragraph", "Rezuscloud-Allow-Deletions: 2\nRezuscloud-Allow-Deletions: 3\n", nil},
	{"body line", "Remove tenants\n\nRezuscloud-Allow-Deletions: 2\nbecause we can\n", nil},
	{"not the last paragraph", "Remove\n\nRezuscloud-Allow-Deletions: 2\n\nMore text.\n", nil},
	{"last paragraph", "Remove\n\nWhy.\n\nRezuscloud-Allow-Deletions: 2\n",
		Trailers{{"Rezuscloud-Allow-Deletions", "2"}}},
	{"no newline at the end", "Remove\n\nRezuscloud-Allow-Deletions: 2",
		Trailers{{"Rezuscloud-Allow-Deletions", "2"}}},
	{"spaces before the colon and around the value", "s\n\nKey \t:   v  \n", Trailers{{"Key", "v"}}},
	{"key with a space inside", "s\n\nSome Key: v\n", nil},
	{"continuation lines", "s\n\nKey: a\n  b\n\tc\nOther: d\n", Trailers{{"Key", "a b c"}, {"Other", "d"}}},
	{"comments in and after the block", "s\n\nKey: a\n# a comment\nOther: b\n# trailing\n\n", Trailers{{"Key", "a"}, {"Other", "b"}}},
	{"a patch after the divider", "s\n\nKey: a\n---\n\nOther: b\n", Trailers{{"Key", "a"}}},
	{"divider hides later trailers", "s\n\nbody\n--- \nKey: a\n", nil},
	{"a quarter with a git trailer", "s\n\nline one\nline two\nline three\nSigned-off-by: A <a@b>\nKey: v\n",
		Trailers{{"Signed-off-by", "A <a@b>"}, {"Key", "v"}}},
	{"less than a quarter", "s\n\na\nb\nc\nd\ne\nf\ng\nSigned-off-by: A <a@b>\n", nil},
	{"mixed without a git trailer", "s\n\nsome text\nKey: v\n", nil},
	{"scissors", "s\n\nKey: v\n# ------------------------ >8 ------------------------\nOther: x\n", Trailers{{"Key", "v"}}},
	{"carriage returns", "s\r\n\r\nKey: v\r\n", Trailers{{"Key", "v"}}},
	{"vertical tab is not a blank", "s\n\nKey: v\nA\v: w\n", nil},
	{"NUL ends the message", "s\n\nKey: v\x00\n\nOther: w\n", Trailers{{"Key", "v"}}},
	{"empty value", "s\n\nKey:\n", Trailers{{"Key", ""}}},
	{"empty", "", nil},
}

func TestParseTrailers(t *testing.T) {
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			if got := ParseTrailers(c.msg); !slices.Equal(got, c.want) {
				t.Errorf("ParseTrailers(%q) = %q, want %q", c.msg, got, c.want)
			}
		})
	}
}

func TestTrailersGet(t *testing.T) {
	tr := ParseTrailers("s\n\nrezuscloud-allow-deletions: 1\nOther: x\nREZUSCLOUD-ALLOW-DELETIONS: 3\n")
	if v, ok := tr.Get("Rezuscloud-Allow-Deletions"); !ok || v != "3" {
		t.Errorf("Get = %q, %v; want the last one, 3, whatever the case", v, ok)
	}
	if _, ok := tr.Get("Missing"); ok {
		t.Error("Get found a key that is not there")
	}
}

// corpus holds messages for the comparison with git; every table case
// is added to it.
var corpus = []string{
	"Subject\n\nBody text that goes on.\n\nReviewed-by: A <a@example.com>\nSigned-off-by: B <b@example.com>\n",
	"Subject\n\nBody\n\nSigned-off-by: B <b@example.com>\n(cherry picked from commit 0123456789abcdef)\n",
	"Subject\n\n# only a comment\n",
	"#comment subject\nKey: v\n\nKey: w\n",
	"#a\n#b\n",
	"Subject\n\nConflicts:\n\tfile.go\n\nKey: v\n",
	"Subject\n\nKey: v\n\nConflicts:\n\tfile.go\n",
	"Subject\n\nKey: v\n   \n",
	"Subject\n\n   \nKey: v\n",
	"Subject\n\n  leading continuation\nKey: v\n",
	"Subject\n\nKey: v\n  cont\n# c\n  after comment\n",
	"Subject\n\nKey: v\n  \n  more\n",
	"Subject\n\nKey:v\nK-e-y:   \n-: x\n9: y\n",
	"Subject\n\n:no key\n",
	"Subject\n\nKey : v\nKey\t: w\nKe y: x\n",
	"Subject\n\nnot a trailer\nKey: v\nSigned-off-by: me\n",
	"Subject\n\na\nb\nc\nSigned-off-by: me\n",
	"Subject\n\n---\nKey: v\n",
	"Subject\n\nKey: v\n---",
	"Subject\n\nKey: v\n---x\n",
	"Subject\n\nKey: v\n\n\n\n",
	"# ------------------------ >8 ------------------------\nKey: v\n",
	"Subject\n\nKey: v\n\n# ------------------------ >8 ------------------------\n",
	"Subject\n\nKey: é\nÜber: x\n",
	"Subject\r\n\r\nKey: v\r\n  w\r\n",
	"Subject\n\nKey: v\fx\n",
	"\n\nKey: v\n",
	"\nKey: v\n",
	"Subject\n\n\n\nKey: v",
	"Rezuscloud-Allow-Deletions: 2\n\nRezuscloud-Allow-Deletions: 3\n",
}

// TestParseTrailersLikeGit compares ParseTrailers with `git
// interpret-trailers --parse` on the corpus and the table's messages.
func TestParseTrailersLikeGit(t *testing.T) {
	g := newGitTrailers(t)
	msgs := slices.Clone(corpus)
	for _, c := range parseCases {
		msgs = append(msgs, c.msg)
	}
	for _, msg := range msgs {
		want, err := g.parse(msg)
		if err != nil {
			t.Fatalf("git on %q: %v", msg, err)
		}
		if got := format(ParseTrailers(msg)); got != want {
			t.Errorf("message %q:\n got %q\ngit %q", msg, got, want)
		}
	}
}

// FuzzParseTrailers compares ParseTrailers with git on random messages.
// Without git it only checks that parsing never fails.
func FuzzParseTrailers(f *testing.F) {
	for _, m := range corpus {
		f.Add(m)
	}
	var g *gitTrailers
	if _, err := exec.LookPath("git"); err == nil {
		g = newGitTrailers(f)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		got := format(ParseTrailers(msg))
		if g == nil {
			return
		}
		want, err := g.parse(msg)
		if errors.Is(err, context.DeadlineExceeded) {
			t.Skip("git did not finish") // git 2.39 loops on a scissors line after a divider
		}
		if err != nil {
			t.Fatalf("git: %v", err)
		}
		if got != want {
			t.Errorf("message %q:\n got %q\ngit %q", msg, got, want)
		}
	})
}

// gitTrailers runs `git interpret-trailers --parse` with no configuration
// but git's defaults.
type gitTrailers struct{ env []string }

func newGitTrailers(t testing.TB) *gitTrailers {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	home := t.TempDir()
	return &gitTrailers{env: []string{"HOME=" + home, "XDG_CONFIG_HOME=" + home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + os.DevNull, "PATH=" + os.Getenv("PATH"), "LC_ALL=C"}}
}

func (g *gitTrailers) parse(msg string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "interpret-trailers", "--parse")
	cmd.Env = g.env
	cmd.Dir = os.TempDir()
	cmd.Stdin = strings.NewReader(msg)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", errors.New(err.Error() + ": " + stderr.String())
	}
	return out.String(), nil
}

// format prints trailers as git's --parse does.
func format(tr Trailers) string {
	var b strings.Builder
	for _, t := range tr {
		b.WriteString(t.Key + ": " + t.Value + "\n")
	}
	return b.String()
}
