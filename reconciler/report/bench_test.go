package report

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
)

// BenchmarkDispatcherSend measures Send while the forge never answers:
// what reconciliation pays per status.
func BenchmarkDispatcherSend(b *testing.B) {
	g := newGate()
	f := newForge(b, g.hold(201))
	defer g.open()
	gh, err := NewGitHub(GitHubOptions{APIURL: f.URL, Owner: "a", Repo: "b", Token: "t"})
	if err != nil {
		b.Fatal(err)
	}
	d := NewDispatcher([]Reporter{gh}, DispatcherOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ss := make([]Status, 64)
	for i := range ss {
		ss[i] = Status{SHA: testSHA, Context: fmt.Sprintf("rezuscloud/eu/t%d", i), State: StatePending, Description: "applying"}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		d.Send(ss[i%len(ss)])
	}
	b.StopTimer()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.Close(ctx)
}

// BenchmarkGitNotesReport measures one report through a git daemon on
// loopback: fetch, merge, commit, push.
func BenchmarkGitNotesReport(b *testing.B) {
	r := newNotesRepo(b)
	n, err := NewGitNotes(GitNotesOptions{RepoDir: b.TempDir(), RemoteURL: r.url})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		s := Status{SHA: r.sha, Context: "rezuscloud/eu/prod", State: StateSuccess, Description: fmt.Sprintf("run %d", i)}
		if err := n.Report(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
}
