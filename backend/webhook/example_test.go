package webhook_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/rezuscloud/rezuscloud/backend/webhook"
)

// The server follows one repository. A signed push for it triggers a
// fetch; the handler answers at once and leaves coalescing to the source.
func ExampleNew() {
	secret, err := webhook.SecretFrom("", func(string) string { return "example-secret" })
	if err != nil {
		fmt.Println(err)
		return
	}
	follow := webhook.NormalizeRepoURL("git@github.com:acme/infra.git")
	fetch := make(chan struct{}, 1)
	h, err := webhook.New(webhook.Options{
		Secret: secret,
		Trigger: webhook.TriggerFunc(func(repoURL, ref string) bool {
			if repoURL != "" && webhook.NormalizeRepoURL(repoURL) != follow {
				return false
			}
			select {
			case fetch <- struct{}{}:
			default:
			}
			return true
		}),
		Observe: func(hook, result string) { fmt.Println("observed", hook, result) },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	body := `{"ref":"refs/heads/main","repository":{"clone_url":"https://github.com/acme/infra.git"}}`
	req, _ := http.NewRequest(http.MethodPost, srv.URL+webhook.Prefix+webhook.HookGitHub, strings.NewReader(body))
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(secret, []byte(body)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
	os.Stdout.ReadFrom(resp.Body)
	fmt.Println("fetches pending:", len(fetch))
	// Output:
	// observed github accepted
	// 202 Accepted
	// {"status":"accepted","repository":"https://github.com/acme/infra.git","ref":"refs/heads/main"}
	// fetches pending: 1
}
