package talos

import (
	"crypto/sha256"
	"fmt"
	"net/url"
	"reflect"
	"unicode/utf8"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
)

// CheckMachineConfig reports what MachineConfig would report for in,
// without the YAML: nil when MachineConfig returns a config, else the same
// error. It is the check of a fleet's validation, which renders thousands
// of configs that differ only in their tenant's name and endpoint.
//
// The costly part of MachineConfig is its round trip: the config is
// encoded and loaded back as a node loads it, and what loaded is
// validated. Configs of the same shape (every input but the cluster name
// and the endpoint equal, and a throwaway validation bundle) share it: the
// first config of a shape that passes is kept, as built and as loaded;
// for a later config of that shape, the kept built config with every
// string's occurrences of the kept tenant's name, endpoint and endpoint
// host replaced by the new tenant's must equal the new config exactly
// (substituted). Then the loaded config of the new tenant is the kept
// loaded config with the same replacement, because YAML carries each string
// value as its own scalar (a URL as its text, which is checked to parse
// back to itself), and that is what is validated. A config that differs
// in anything else, in a value a replacement cannot explain, or that
// fails, takes MachineConfig's whole path, which names the patch to blame.
func CheckMachineConfig(in ConfigInput) error {
	cfg, err := build(in)
	if err != nil {
		return err
	}
	key, ok := shapeKey(in)
	if ok {
		if kept, hit := shapes.load(key); hit {
			if passed, ok := kept.covers(in, cfg); ok && passed {
				return nil
			}
		}
	}
	loaded, verr := roundTrip(cfg, in.Mode)
	if verr != nil {
		return blame(in, verr)
	}
	if ok {
		shapes.store(key, keepShape(in, cfg, loaded))
	}
	return nil
}

// maxShapes bounds the kept shapes; each keeps two configs.
const maxShapes = 128

var shapes = memo[[sha256.Size]byte, *shape]{max: maxShapes}

// shape is a config that passed the round trip, as built and as loaded,
// and the strings of its tenant that a replacement maps.
type shape struct {
	built, loaded []config.Document
	from          []string // name, endpoint, host, hostname
}

// tenantStrings are the strings of in that differ between the tenants of a
// shape, longest first, so that a replacement prefers the endpoint over
// its host; ok is false when one is empty or the endpoint is no URL that
// its text gives back.
func tenantStrings(in ConfigInput) ([]string, bool) {
	u, err := url.Parse(in.ControlPlaneEndpoint)
	if err != nil || in.ClusterName == "" || u.Host == "" || u.Hostname() == "" {
		return nil, false
	}
	strs := []string{in.ControlPlaneEndpoint, u.Host, u.Hostname(), in.ClusterName}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			return nil, false
		}
	}
	return strs, true
}

// shapeKey digests every input of in but the tenant's name and endpoint;
// ok is false for an input whose bundle is not a throwaway validation
// bundle (a tenant's own keys are never kept) or whose tenant strings do
// not qualify.
func shapeKey(in ConfigInput) ([sha256.Size]byte, bool) {
	sum := sha256.Sum256(in.Secrets)
	if _, ok := validationParsed.Load(sum); !ok {
		return sum, false
	}
	if _, ok := tenantStrings(in); !ok {
		return sum, false
	}
	h := sha256.New()
	fmt.Fprintf(h, "%x\x00%q\x00%q\x00%q\x00%q\x00%q\x00%q\x00%q\x00%d\x00%t\x00%d\x00%d\x00",
		sum, in.KubernetesVersion, in.TalosVersion, in.PodNetwork, in.ServiceNetwork, in.CNI, in.Role,
		in.InstallDisk, in.Mode, in.Now.IsZero(), in.Now.UnixNano(), len(in.Patches))
	for _, p := range in.Patches {
		fmt.Fprintf(h, "%d\x00%s", len(p.Patch), p.Patch)
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k, true
}

// keepShape keeps copies of a config that passed, built and loaded.
func keepShape(in ConfigInput, built, loaded coreconfig.Provider) *shape {
	from, _ := tenantStrings(in)
	return &shape{built: built.Clone().Documents(), loaded: loaded.Clone().Documents(), from: from}
}

// covers reports whether cfg, built from in, is the kept config with the
// kept tenant's strings replaced by in's (ok), and if so whether the kept
// loaded config, so replaced, passes validation (passed).
func (s *shape) covers(in ConfigInput, cfg coreconfig.Provider) (passed, ok bool) {
	to, ok := tenantStrings(in)
	if !ok {
		return false, false
	}
	r := newReplacer(s.from, to)
	built, ok := replaceDocs(s.built, r)
	if !ok || !reflect.DeepEqual(built, cfg.Documents()) {
		return false, false
	}
	loaded, ok := replaceDocs(s.loaded, r)
	if !ok {
		return false, false
	}
	c, err := container.New(loaded...)
	if err != nil {
		return false, false
	}
	return validate(c, in.Mode) == nil, true
}

// replaceDocs returns docs with r applied to every string; the kept
// documents are never changed (a changed value is a new copy).
func replaceDocs(docs []config.Document, r *replacer) ([]config.Document, bool) {
	out := make([]config.Document, len(docs))
	for i, d := range docs {
		v, _, ok := replaceStrings(reflect.ValueOf(d), r, 0)
		if !ok {
			return nil, false
		}
		out[i] = v.Interface().(config.Document)
	}
	return out, true
}
