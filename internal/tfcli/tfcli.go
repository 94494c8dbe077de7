// Package tfcli writes the OpenTofu CLI configuration that every tofu run of
// the project uses: providers under rezuscloud.io, and any registry provider
// the mirror holds (such as the OpenStack provider `make build` installs),
// come from a filesystem mirror and never from the network; every other
// provider installs from its registry as usual. The update checkpoint is
// off, and an optional shared plugin cache is set. It must not import
// anything else of the project but internal/atomicfile, and holds no
// credentials.
package tfcli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
)

// MirrorInclude is the provider address pattern served from the mirror.
const MirrorInclude = "rezuscloud.io/*/*"

// CLIConfig says what goes into the CLI configuration.
type CLIConfig struct {
	// MirrorDir is the filesystem mirror holding the project's providers,
	// laid out HOST/NAMESPACE/TYPE/VERSION/OS_ARCH/. Required; a relative
	// path is made absolute, since tofu would read it relative to each
	// work directory.
	MirrorDir string
	// PluginCacheDir, if set, becomes plugin_cache_dir (made absolute too).
	PluginCacheDir string
}

// WriteCLIConfig writes the CLI configuration for c to path (mode 0600),
// atomically. Point TF_CLI_CONFIG_FILE at it.
func WriteCLIConfig(path string, c CLIConfig) error {
	b, err := Render(c)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("tofu CLI config: %w", err)
	}
	return nil
}

// Render returns the CLI configuration for c as HCL.
func Render(c CLIConfig) ([]byte, error) {
	if c.MirrorDir == "" {
		return nil, errors.New("tofu CLI config: no provider mirror directory given")
	}
	mirror, err := filepath.Abs(c.MirrorDir)
	if err != nil {
		return nil, fmt.Errorf("tofu CLI config: mirror directory: %w", err)
	}
	include := []string{quote(MirrorInclude)}
	for _, addr := range Mirrored(mirror) {
		include = append(include, quote(addr))
	}
	patterns := strings.Join(include, ", ")
	var b strings.Builder
	b.WriteString("disable_checkpoint = true\n")
	if c.PluginCacheDir != "" {
		cache, err := filepath.Abs(c.PluginCacheDir)
		if err != nil {
			return nil, fmt.Errorf("tofu CLI config: plugin cache directory: %w", err)
		}
		fmt.Fprintf(&b, "plugin_cache_dir = %s\n", quote(cache))
	}
	fmt.Fprintf(&b, `
provider_installation {
  filesystem_mirror {
    path    = %s
    include = [%s]
  }
  direct {
    exclude = [%s]
  }
}
`, quote(mirror), patterns, patterns)
	return []byte(b.String()), nil
}

// Mirrored returns the addresses (HOST/NAMESPACE/TYPE) of the providers
// outside rezuscloud.io that the mirror at dir holds, sorted. Those come
// from the mirror only; the registry is never asked for them.
func Mirrored(dir string) []string {
	var out []string
	hosts, _ := os.ReadDir(dir)
	for _, h := range hosts {
		if !h.IsDir() || h.Name() == "rezuscloud.io" || strings.HasPrefix(h.Name(), ".") {
			continue
		}
		namespaces, _ := os.ReadDir(filepath.Join(dir, h.Name()))
		for _, ns := range namespaces {
			if !ns.IsDir() {
				continue
			}
			types, _ := os.ReadDir(filepath.Join(dir, h.Name(), ns.Name()))
			for _, ty := range types {
				if ty.IsDir() {
					out = append(out, h.Name()+"/"+ns.Name()+"/"+ty.Name())
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// quote returns s as a string literal of the CLI configuration's syntax
// (HCL 1, which has no templates there): quotes, backslashes and control
// characters escaped.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
