package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/reconciler"
	"github.com/rezuscloud/rezuscloud/reconciler/report"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/sources"
)

// reportFlags choose where commit statuses go besides the API.
type reportFlags struct {
	reporters       string
	instance        string
	githubAPI       string
	githubTokenFile string
	gitlabAPI       string
	gitlabTokenFile string
}

// newReports builds the commit status reporters that --report names and
// returns the function the reconciler calls with every Commit it records,
// and one that drains the reports on shutdown. With none named, both do
// nothing. It sets p.onDrift, which reports drift checks on the applied
// commit (report.DriftStatus).
func newReports(f *serveFlags, repoURL, dataDir, apiURL string, auth sources.Auth, log *slog.Logger, p *reconcilerPart) (func(*schema.Commit), func(), error) {
	noop := func() {}
	if strings.TrimSpace(f.reports.reporters) == "" {
		return nil, noop, nil
	}
	if repoURL == "" {
		return nil, noop, fmt.Errorf("--report needs --repo: commit statuses belong to a git repository")
	}
	instance := f.reports.instance
	if instance == "" {
		instance = report.DefaultInstance()
	}
	if err := report.CheckInstance(instance); err != nil {
		return nil, noop, fmt.Errorf("--instance: %w", err)
	}
	var reps []report.Reporter
	for _, name := range strings.Split(f.reports.reporters, ",") {
		switch strings.TrimSpace(name) {
		case "github", "gitea", "forgejo":
			tok, err := report.TokenFrom(f.reports.githubTokenFile, report.EnvGitHubToken, f.getenv)
			if err != nil {
				return nil, noop, fmt.Errorf("--report %s: %w", name, err)
			}
			gh, err := report.NewGitHub(report.GitHubOptions{APIURL: f.reports.githubAPI, RepoURL: repoURL, Token: tok})
			if err != nil {
				return nil, noop, err
			}
			reps = append(reps, gh)
		case "gitlab":
			tok, err := report.TokenFrom(f.reports.gitlabTokenFile, report.EnvGitLabToken, f.getenv)
			if err != nil {
				return nil, noop, fmt.Errorf("--report gitlab: %w", err)
			}
			gl, err := report.NewGitLab(report.GitLabOptions{APIURL: f.reports.gitlabAPI, RepoURL: repoURL, Token: tok})
			if err != nil {
				return nil, noop, err
			}
			reps = append(reps, gl)
		case "git-notes":
			gn, err := report.NewGitNotes(report.GitNotesOptions{RepoDir: filepath.Join(dataDir, "notes"), RemoteURL: repoURL, Auth: auth})
			if err != nil {
				return nil, noop, err
			}
			reps = append(reps, gn)
		default:
			return nil, noop, fmt.Errorf("--report %q: want github (also for gitea and forgejo), gitlab or git-notes", name)
		}
	}
	d := report.NewDispatcher(reps, report.DispatcherOptions{Logger: log.With("component", "report")})
	base := f.dashboardURL(apiURL)
	send := func(c *schema.Commit) {
		d.Send(report.StatusesFor(instance, c, commitPage(base, c.Metadata.Name))...)
	}
	p.onDrift = func(rep reconciler.DriftReport) {
		d.Send(report.DriftStatus(instance, rep.Tenant, rep.Revision, rep.Drifted, rep.Message, commitPage(base, schema.CommitName(rep.Revision))))
	}
	closeFn := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			log.Warn("commit statuses not delivered before shutdown", "err", err)
		}
	}
	return send, closeFn, nil
}

// commitPage is the URL of a commit's page on the dashboard at base.
func commitPage(base, name string) string { return base + "/commits/" + url.PathEscape(name) }
