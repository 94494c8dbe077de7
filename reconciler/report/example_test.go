package report_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/rezuscloud/rezuscloud/reconciler/report"
	"github.com/rezuscloud/rezuscloud/schema"
)

func ExampleDispatcher() {
	// A stand-in for api.github.com that prints what it is sent.
	forge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]string
		json.NewDecoder(r.Body).Decode(&body)
		fmt.Println(r.Method, r.URL.Path[:len("/repos/acme/infra/statuses/")], body["context"], body["state"], body["description"])
		w.WriteHeader(http.StatusCreated)
	}))
	defer forge.Close()

	token, err := report.TokenFrom("", report.EnvGitHubToken, func(name string) string {
		return map[string]string{report.EnvGitHubToken: "ghp_example"}[name]
	})
	if err != nil {
		panic(err)
	}
	gh, err := report.NewGitHub(report.GitHubOptions{APIURL: forge.URL, RepoURL: "git@github.com:acme/infra.git", Token: token})
	if err != nil {
		panic(err)
	}
	d := report.NewDispatcher([]report.Reporter{gh}, report.DispatcherOptions{})

	c := &schema.Commit{
		Spec: schema.CommitSpec{SHA: "0123456789abcdef0123456789abcdef01234567"},
		Status: schema.CommitStatus{Phase: schema.CommitSucceeded, Tenants: []schema.TenantResult{
			{Tenant: "prod", Phase: schema.CommitSucceeded, Plan: schema.PlanSummary{Add: 2, Destroy: 1}},
		}},
	}
	d.Send(report.StatusesFor("eu-1", c, "")...)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		panic(err)
	}
	// Output:
	// POST /repos/acme/infra/statuses/ rezuscloud/eu-1 success applied 1 tenant: +2 ~0 -1
	// POST /repos/acme/infra/statuses/ rezuscloud/eu-1/prod success applied: +2 ~0 -1
}
