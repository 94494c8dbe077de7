package reconciler

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Each bare-metal machine in use without a pinned fingerprint is named
// once, with its node group and file:line; a pinned machine, a spare
// beyond count and a machine of another cloud are not.
func TestWarnUnpinnedMetal(t *testing.T) {
	const manifests = `apiVersion: rezuscloud.io/v1
kind: Tenant
metadata:
  name: lab
spec:
  kubernetesVersion: "1.34.1"
  talosVersion: "1.12.6"
  controlPlaneEndpoint: https://lab.example.internal:6443
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: cp
  labels:
    rezuscloud.io/tenant: lab
    rezuscloud.io/role: controlplane
spec:
  count: 2
  providerClass: metal
  providerConfig:
    machines:
      - address: 127.3.0.1
      - address: 127.3.0.2
        fingerprint: 9tDUR2QTrDwvR9wUpjL6JuojzFc59q9dp3Y8aNs4Gho=
      - address: 127.3.0.3
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: workers
  labels:
    rezuscloud.io/tenant: lab
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: metal
  providerConfig:
    machines:
      - address: 127.3.0.21
---
apiVersion: rezuscloud.io/v1
kind: NodeGroup
metadata:
  name: cloud
  labels:
    rezuscloud.io/tenant: lab
    rezuscloud.io/role: worker
spec:
  count: 1
  providerClass: sim
`
	d, err := schema.Load(fstest.MapFS{"lab.yaml": {Data: []byte(manifests)}}, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	warnUnpinnedMetal(slog.New(slog.NewJSONHandler(&buf, nil)), "abc123", d)
	var got []string
	for _, line := range strings.Split(buf.String(), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["level"] != "WARN" || !strings.Contains(rec["msg"].(string), "whoever answers at its address in maintenance mode receives the cluster's secrets") ||
			rec["revision"] != "abc123" || rec["tenant"] != "lab" {
			t.Errorf("log record %v", rec)
		}
		got = append(got, rec["nodeGroup"].(string)+" "+rec["address"].(string)+" "+rec["source"].(string))
	}
	want := []string{"cp 127.3.0.1 lab.yaml:22", "workers 127.3.0.21 lab.yaml:39"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings for\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
