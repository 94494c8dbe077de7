package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/rezuscloud/rezuscloud/notify"
)

// A server reads its notification config, runs the Notifier beside the
// reconciler, and hands it events; a generic webhook receives them.
func Example() {
	texts := make(chan string, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct{ Text string }
		json.NewDecoder(r.Body).Decode(&m)
		texts <- m.Text
	}))
	defer hook.Close()

	dir, _ := os.MkdirTemp("", "notify-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "notifications.yaml")
	os.WriteFile(path, []byte(`
providers:
  - name: ops-hook
    type: webhook
    address: `+hook.URL+`
alerts:
  - name: failures
    providers: [ops-hook]
    severities: [error]
`), 0o600)

	cfg, err := notify.LoadConfig(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	n, err := notify.New(cfg, notify.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.Run(ctx)

	n.Notify(notify.Event{Reason: notify.ReconcileFailed, Severity: notify.SeverityError, Tenant: "shop",
		Commit:  notify.Commit{SHA: "8f3c2a1b9d0e4f5a6b7c8d9e0f1a2b3c4d5e6f7a", Subject: "add a worker pool"},
		Message: "tofu apply failed: quota exceeded", URL: "https://rezus.example.com/tenants/shop", Time: time.Now()})
	fmt.Println(<-texts)
	// Output:
	// ReconcileFailed in tenant shop
	// tofu apply failed: quota exceeded
	// Commit 8f3c2a1b9d0e: add a worker pool
	// https://rezus.example.com/tenants/shop
}
