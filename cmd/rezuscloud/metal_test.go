package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/rezuscloud/rezuscloud/render/provider/metal"
	"github.com/rezuscloud/rezuscloud/schema"
)

// serveSettings parses args for `serve` with env as the environment and
// returns the settings, without serving.
func serveSettings(t *testing.T, env map[string]string, args ...string) *serveFlags {
	t.Helper()
	var got *serveFlags
	cmd := newServeCmd(func(k string) string { return env[k] }, func(_ context.Context, f *serveFlags, _ io.Writer) error {
		got = f
		return nil
	})
	cmd.SetArgs(args)
	cmd.SetOut(new(bytes.Buffer))
	cmd.SetErr(new(bytes.Buffer))
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestAllowLoopbackMetal: the server's modules refuse a bare-metal machine
// at a loopback address unless --allow-loopback-metal is set, as a flag,
// an environment variable or a config key; the metal demo sets it, the
// other demos do not.
func TestAllowLoopbackMetal(t *testing.T) {
	d, err := schema.Load(fstest.MapFS{"t.yaml": {Data: []byte(`apiVersion: rezuscloud.io/v1
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
  count: 1
  providerClass: metal
  providerConfig:
    machines:
      - address: 127.3.0.1
`)}}, ".", nil)
	if err != nil {
		t.Fatal(err)
	}
	refused := func(f *serveFlags) bool {
		probs := providerModules(f)[metal.Class].Validate(d.Tenants[0].NodeGroups[0])
		return len(probs) == 1 && strings.HasPrefix(probs[0].String(), `t.yaml:22:1: /spec/providerConfig/machines/0/address: metal providerConfig.machines[0].address "127.3.0.1" is a loopback address`)
	}
	if f := serveSettings(t, nil); !refused(f) {
		t.Error("by default a loopback machine is accepted")
	}
	file := filepath.Join(t.TempDir(), "rezuscloud.yaml")
	if err := os.WriteFile(file, []byte("allow-loopback-metal: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]*serveFlags{
		"flag":        serveSettings(t, nil, "--allow-loopback-metal"),
		"environment": serveSettings(t, map[string]string{"REZUSCLOUD_ALLOW_LOOPBACK_METAL": "true"}),
		"config file": serveSettings(t, nil, "--config", file),
	} {
		if refused(f) {
			t.Errorf("with the setting in the %s, a loopback machine is refused", name)
		}
	}
	for cloud, allowed := range map[string]bool{"metal": true, "sim": false, "openstack": false} {
		if f := demoServeFlags(&demoFlags{cloud: cloud}, t.TempDir(), "repo", os.Getenv); f.allowLoopbackMetal != allowed {
			t.Errorf("demo --cloud %s: allowLoopbackMetal %t", cloud, f.allowLoopbackMetal)
		}
	}
}
