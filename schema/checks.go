package schema

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"
	yamlv3 "sigs.k8s.io/yaml/goyaml.v3"
)

// checkDocument checks what the schema cannot say about a document: the
// control-plane endpoint, the networks, unique patch names and the patches'
// YAML. It works on the decoded value, so that it runs (and reports) even
// where the schema found other problems; a field of the wrong type is left
// to the schema's problem.
func checkDocument(d *document, obj map[string]any, checkPatch func(string) string) []Problem {
	var problems []Problem
	if d.kind == KindTenant {
		if s, ok := lookup(obj, "/spec/controlPlaneEndpoint").(string); ok {
			if msg := checkEndpoint(s); msg != "" {
				problems = append(problems, d.problem("/spec/controlPlaneEndpoint", "%s", msg))
			}
		}
		problems = append(problems, checkNetworks(d, obj)...)
		problems = append(problems, checkDriftPolicy(d, obj)...)
		problems = append(problems, checkSuspend(d, obj)...)
		problems = append(problems, checkMaintenanceWindows(d, obj)...)
		problems = append(problems, checkRollout(d, obj)...)
		problems = append(problems, checkBackup(d, obj)...)
		problems = append(problems, checkServiceAccountKey(d, obj)...)
	}
	if d.kind != KindConfigPatch {
		problems = append(problems, checkDrain(d, obj)...)
		problems = append(problems, checkPatchNames(d, obj)...)
	}
	return append(problems, preparePatches(d, obj, checkPatch)...)
}

// canonicalize puts versions and networks of a checked object in canonical
// form: versions without a leading "v", networks as netip writes them.
func canonicalize(obj any) {
	switch o := obj.(type) {
	case *Tenant:
		o.Spec.KubernetesVersion = canonicalVersion(o.Spec.KubernetesVersion)
		o.Spec.TalosVersion = canonicalVersion(o.Spec.TalosVersion)
		for _, list := range [][]string{o.Spec.PodNetwork, o.Spec.ServiceNetwork} {
			for i, s := range list {
				if p, err := netip.ParsePrefix(s); err == nil {
					list[i] = p.String()
				}
			}
		}
	case *NodeGroup:
		o.Spec.TalosVersion = canonicalVersion(o.Spec.TalosVersion)
	}
}

// canonicalVersion drops the optional leading "v" of a version that the
// schema has already checked.
func canonicalVersion(v string) string {
	return strings.TrimPrefix(v, "v")
}

// checkServiceAccountKey checks that an RSA service-account key is asked
// of a Talos version that makes one: Talos before 1.7 makes ECDSA keys
// only.
func checkServiceAccountKey(d *document, obj map[string]any) []Problem {
	key, _ := lookup(obj, "/spec/serviceAccountKey").(string)
	version, _ := lookup(obj, "/spec/talosVersion").(string)
	if key != ServiceAccountKeyRSA {
		return nil
	}
	major, rest, _ := strings.Cut(canonicalVersion(version), ".")
	minor, _, _ := strings.Cut(rest, ".")
	maj, err1 := strconv.Atoi(major)
	mnr, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil || maj > 1 || maj == 1 && mnr >= 7 {
		return nil // a version the schema refuses, or one new enough
	}
	return []Problem{d.problem("/spec/serviceAccountKey", "rsa needs Talos 1.7 or newer, and talosVersion is %s: Talos makes ECDSA service-account keys before 1.7 (leave the field out, or set ecdsa)", version)}
}

// checkEndpoint returns what is wrong with a control-plane endpoint, or "".
func checkEndpoint(s string) string {
	const want = "must be an https URL with a port, such as https://cluster.example.internal:6443"
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Sprintf("%q is not a URL: %s", s, want)
	}
	switch {
	case u.Scheme != "https":
		return fmt.Sprintf("%q %s (the scheme must be https)", s, want)
	case u.Opaque != "" || u.Host == "":
		return fmt.Sprintf("%q %s (it has no host)", s, want)
	case u.User != nil:
		return fmt.Sprintf("%q must not carry user credentials", s)
	case u.Hostname() == "":
		return fmt.Sprintf("%q %s (it has no host)", s, want)
	case u.Port() == "":
		return fmt.Sprintf("%q %s (the port is missing)", s, want)
	case u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/"):
		return fmt.Sprintf("%q must be just scheme, host and port, without a path, query or fragment", s)
	}
	if port, err := strconv.Atoi(u.Port()); err != nil || port < 1 || port > 65535 {
		return fmt.Sprintf("%q has port %s; a port is a number from 1 to 65535", s, u.Port())
	}
	return ""
}

// checkNetworks checks that the pod and service networks are CIDRs with
// their host bits zero and that none overlaps another.
func checkNetworks(d *document, obj map[string]any) []Problem {
	type network struct {
		path   string
		prefix netip.Prefix
	}
	var (
		problems []Problem
		seen     []network
	)
	for _, field := range []string{"podNetwork", "serviceNetwork"} {
		list, _ := lookup(obj, "/spec/"+field).([]any)
		for i, item := range list {
			s, ok := item.(string)
			if !ok {
				continue
			}
			path := "/spec/" + field + "/" + strconv.Itoa(i)
			p, err := netip.ParsePrefix(s)
			if err != nil {
				problems = append(problems, d.problem(path, "%q is not a CIDR such as 10.244.0.0/16 or fd00:10:244::/56", s))
				continue
			}
			if p.Masked() != p {
				problems = append(problems, d.problem(path, "%q has host bits set; the network is %s", s, p.Masked()))
				continue
			}
			for _, o := range seen {
				if o.prefix.Overlaps(p) {
					problems = append(problems, d.problem(path, "%s overlaps %s (%s)", p, o.prefix, strings.TrimPrefix(o.path, "/spec/")))
				}
			}
			seen = append(seen, network{path, p})
		}
	}
	return problems
}

// checkPatchNames checks that the names in spec.configPatches are unique.
func checkPatchNames(d *document, obj map[string]any) []Problem {
	var problems []Problem
	list, _ := lookup(obj, "/spec/configPatches").([]any)
	first := make(map[string]int, len(list))
	for i, item := range list {
		name, ok := lookup(item, "/name").(string)
		if !ok {
			continue
		}
		path := "/spec/configPatches/" + strconv.Itoa(i) + "/name"
		if j, dup := first[name]; dup {
			problems = append(problems, d.problem(path, "patch name %q is used twice in this list (first at line %d)", name, d.at("/spec/configPatches/"+strconv.Itoa(j)+"/name").line))
			continue
		}
		first[name] = i
	}
	return problems
}

// preparePatches checks every Talos config patch of a validated document:
// a patch written as a string must be YAML, and one written as a mapping is
// replaced by its YAML text (keys sorted), so that every patch reaches the
// Go types as text.
func preparePatches(d *document, obj map[string]any, checkPatch func(string) string) []Problem {
	var problems []Problem
	do := func(holder map[string]any, path string) {
		switch v := holder["patch"].(type) {
		case string:
			if v == "" { // an empty string is the schema's problem
				return
			}
			if msg := checkPatch(v); msg != "" {
				problems = append(problems, d.problem(path, "%s", msg))
			}
		case map[string]any:
			text, err := yaml.Marshal(v)
			if err != nil {
				problems = append(problems, d.problem(path, "cannot write the patch as YAML: %v", err))
				return
			}
			holder["patch"] = string(text)
		}
	}
	spec, _ := obj["spec"].(map[string]any)
	if d.kind == KindConfigPatch {
		do(spec, "/spec/patch")
		return problems
	}
	list, _ := spec["configPatches"].([]any)
	for i, item := range list {
		if m, ok := item.(map[string]any); ok {
			do(m, "/spec/configPatches/"+strconv.Itoa(i)+"/patch")
		}
	}
	return problems
}

// checkPatchText checks that a patch given as text is YAML: one or more
// documents, each a mapping (a strategic merge patch) or a list (JSON 6902
// operations), within the same guards as manifests. It returns what is
// wrong, or "".
func checkPatchText(text string, maxDepth int) string {
	docs, err := parseDocuments([]byte(text))
	if err != nil {
		p := syntaxProblem("", []byte(text), err)
		if p.Line > 0 {
			return fmt.Sprintf("patch is not valid YAML: %s (line %d of the patch)", p.Message, p.Line)
		}
		return "patch is not valid YAML: " + p.Message
	}
	if len(docs) == 0 {
		return "patch is empty"
	}
	budget := aliasBudget(docs)
	for _, doc := range docs {
		root := doc.Content[0]
		if root.Kind != yamlv3.MappingNode && root.Kind != yamlv3.SequenceNode {
			return "patch must be a YAML mapping (a strategic merge patch) or a list (JSON 6902 operations), not a " + describeNode(root)
		}
		conv := newConverter("", maxDepth, budget, false)
		conv.convert(root, "", nodePos(root), 0, false)
		if len(conv.problems) > 0 {
			p := conv.problems[0]
			return fmt.Sprintf("patch: %s (line %d of the patch)", p.Message, p.Line)
		}
	}
	return ""
}

// patchChecker remembers what checkPatchText said about each patch text, so
// that a patch repeated across tenants is parsed once per Load. It is safe
// for concurrent use.
type patchChecker struct {
	maxDepth int
	mu       sync.Mutex
	seen     map[string]string
}

func (c *patchChecker) check(text string) string {
	c.mu.Lock()
	msg, ok := c.seen[text]
	c.mu.Unlock()
	if ok {
		return msg
	}
	msg = checkPatchText(text, c.maxDepth)
	c.mu.Lock()
	if c.seen == nil {
		c.seen = make(map[string]string)
	}
	c.seen[text] = msg
	c.mu.Unlock()
	return msg
}
