package tfcli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rezuscloud/rezuscloud/internal/testenv"
)

func TestRender(t *testing.T) {
	got, err := Render(CLIConfig{MirrorDir: "/srv/mirror", PluginCacheDir: "/srv/cache"})
	if err != nil {
		t.Fatal(err)
	}
	want := `disable_checkpoint = true
plugin_cache_dir = "/srv/cache"

provider_installation {
  filesystem_mirror {
    path    = "/srv/mirror"
    include = ["rezuscloud.io/*/*"]
  }
  direct {
    exclude = ["rezuscloud.io/*/*"]
  }
}
`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Fatalf("config (-want +got):\n%s", diff)
	}
	got, _ = Render(CLIConfig{MirrorDir: "/srv/mirror"})
	if strings.Contains(string(got), "plugin_cache_dir") {
		t.Fatalf("plugin_cache_dir without a cache dir:\n%s", got)
	}
	if _, err := Render(CLIConfig{}); err == nil || !strings.Contains(err.Error(), "mirror") {
		t.Fatalf("no mirror: err = %v", err)
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		`/a b/c`:      `"/a b/c"`,
		`/x"y\z`:      `"/x\"y\\z"`,
		"/t\tn\nr\r":  `"/t\tn\nr\r"`,
		"/\x01":       `"/\u0001"`,
		`/${HOME}/%{`: `"/${HOME}/%{"`,
		`/$x/%y`:      `"/$x/%y"`,
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestTofuInitFromMirror checks that real tofu reads the written config: a
// provider that exists only in a mirror whose path needs escaping installs
// offline.
func TestTofuInitFromMirror(t *testing.T) {
	tofu := testenv.Tofu(t)
	root := t.TempDir()
	mirror := filepath.Join(root, `mir "ror" ${x} %{y}`)
	pkg := filepath.Join(mirror, "rezuscloud.io", "test", "dummy", "1.2.3", "linux_amd64")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "terraform-provider-dummy_v1.2.3"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(root, "tofu.rc")
	if err := WriteCLIConfig(cfg, CLIConfig{MirrorDir: mirror, PluginCacheDir: filepath.Join(root, "cache")}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(cfg); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("config mode: %v, %v", fi, err)
	}
	if err := os.Mkdir(filepath.Join(root, "cache"), 0o700); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(root, "work")
	os.Mkdir(work, 0o700)
	main := `{"terraform": {"required_providers": {"dummy": {"source": "rezuscloud.io/test/dummy"}}}}`
	if err := os.WriteFile(filepath.Join(work, "main.tf.json"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tofu, "init", "-input=false", "-no-color")
	cmd.Dir = work
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "TF_CLI_CONFIG_FILE=" + cfg}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tofu init: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Installed rezuscloud.io/test/dummy v1.2.3") {
		t.Fatalf("tofu init did not install from the mirror:\n%s", out)
	}
	if strings.Contains(string(out), "CLI configuration") {
		t.Fatalf("tofu complained about the CLI configuration:\n%s", out)
	}
	cached, _ := filepath.Glob(filepath.Join(root, "cache", "rezuscloud.io", "test", "dummy", "1.2.3", "*"))
	if len(cached) == 0 {
		t.Fatalf("plugin cache %s unused", filepath.Join(root, "cache"))
	}
}

// TestRenderMirroredRegistryProviders: a registry provider the mirror holds
// comes from the mirror and is excluded from direct installation; one it
// does not hold is left to the registry.
func TestRenderMirroredRegistryProviders(t *testing.T) {
	mirror := t.TempDir()
	pkg := filepath.Join(mirror, "registry.opentofu.org", "terraform-provider-openstack", "openstack", "3.4.0", "linux_amd64")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := Render(CLIConfig{MirrorDir: mirror})
	if err != nil {
		t.Fatal(err)
	}
	want := `include = ["rezuscloud.io/*/*", "registry.opentofu.org/terraform-provider-openstack/openstack"]`
	if strings.Count(string(got), strings.TrimPrefix(want, "include = ")) != 2 || !strings.Contains(string(got), want) {
		t.Fatalf("config does not take openstack from the mirror only:\n%s", got)
	}
	if strings.Contains(string(got), "oracle") {
		t.Fatalf("config names a provider the mirror does not hold:\n%s", got)
	}
}
