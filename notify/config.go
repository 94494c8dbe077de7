package notify

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/rezuscloud/rezuscloud/internal/labels"
)

// The defaults of the config.
const (
	DefaultCoalesceWindow       = 5 * time.Minute
	DefaultMachineNotReadyAfter = 5 * time.Minute
	DefaultTimeout              = 10 * time.Second
	DefaultQueueSize            = 1024
	maxQueueSize                = 1 << 20
)

// Config is the server's notification config (--notifications): the
// services to send to (Providers) and which events go where (Alerts).
type Config struct {
	Providers []*Provider
	Alerts    []*Alert
	// CoalesceWindow is how long after a message about an event the same
	// event (reason, tenant and machine) is gathered into one later
	// message with a count instead of sent again.
	CoalesceWindow time.Duration
	// MachineNotReadyAfter is how long a machine may stay not ready before
	// MachineNotReady is sent.
	MachineNotReadyAfter time.Duration
}

// ProviderType names the kind of service a provider sends to.
type ProviderType string

// The types of providers.
const (
	Slack        ProviderType = "slack"
	MSTeams      ProviderType = "msteams"
	Discord      ProviderType = "discord"
	GoogleChat   ProviderType = "googlechat"
	Matrix       ProviderType = "matrix"
	PagerDuty    ProviderType = "pagerduty"
	Opsgenie     ProviderType = "opsgenie"
	Alertmanager ProviderType = "alertmanager"
	Webhook      ProviderType = "webhook"
)

// Provider is one service that messages go to. Its address and secret are
// not exported: they may be credentials, and nothing prints them.
type Provider struct {
	Name string
	Type ProviderType
	// Channel is the Slack channel (with a bot token) or the Matrix room ID.
	Channel   string
	Timeout   time.Duration
	QueueSize int

	address  string // the URL, or the service's base URL
	secret   string // token, routing key, GenieKey or HMAC key; "" for none
	template *template.Template
}

func (p *Provider) String() string { return fmt.Sprintf("%s (%s)", p.Name, p.Type) }

// Alert selects the events that go to some providers. An event matches
// when every filter given matches it.
type Alert struct {
	Name      string
	Providers []string
	// TenantNames and TenantSelector select tenants: an event matches when
	// its tenant is one of the names or its labels match the selector. With
	// neither, every event matches, the server's own (without a tenant)
	// too; with either, those never do.
	TenantNames    []string
	TenantSelector labels.Selector
	hasSelector    bool
	// Severities and Events, when given, are the only ones that match.
	Severities []Severity
	Events     []Reason
	// ExclusionList drops events whose message matches any of them.
	ExclusionList []*regexp.Regexp
}

// Matches reports whether ev passes the alert's filters.
func (a *Alert) Matches(ev Event) bool {
	if len(a.Severities) > 0 && !slices.Contains(a.Severities, ev.Severity) {
		return false
	}
	if len(a.Events) > 0 && !slices.Contains(a.Events, ev.Reason) {
		return false
	}
	if len(a.TenantNames) > 0 || a.hasSelector {
		if ev.Tenant == "" {
			return false
		}
		byName := slices.Contains(a.TenantNames, ev.Tenant)
		if !byName && !(a.hasSelector && a.TenantSelector.Matches(ev.Labels)) {
			return false
		}
	}
	for _, re := range a.ExclusionList {
		if re.MatchString(ev.Message) {
			return false
		}
	}
	return true
}

// Provider returns the provider named name, or nil.
func (c *Config) Provider(name string) *Provider {
	for _, p := range c.Providers {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Reasons are the events the server sends, in the order the docs list them.
var Reasons = []Reason{ReconcileFailed, Recovered, Stalled, Drifted, DriftResolved, RolloutStarted, RolloutSucceeded,
	RolloutFailed, BootstrapDone, BackupFailed, BackupRecovered, CommitRefused, MachineNotReady, ReplicaLost, Test}

var providerTypes = []ProviderType{Slack, MSTeams, Discord, GoogleChat, Matrix, PagerDuty, Opsgenie, Alertmanager, Webhook}

// maxConfigSize bounds the config file and every file it names.
const maxConfigSize = 1 << 20

// LoadConfig reads the notification config at path. Files it names
// (addressFile, secretFile) are read now, relative to the config's
// directory. Every mistake found is in the error, each with file:line;
// unknown fields are mistakes.
func LoadConfig(path string) (*Config, error) {
	data, err := readSmall(path)
	if err != nil {
		return nil, fmt.Errorf("notifications config: %w", err)
	}
	return ParseConfig(data, path)
}

// ParseConfig reads a notification config from data; file names it in
// errors, and files the config names are relative to its directory.
func ParseConfig(data []byte, file string) (*Config, error) {
	d := &decoder{file: file}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: the notifications config is empty", file)
		}
		var le *yaml.LoadError
		if errors.As(err, &le) && le.Mark.Line > 0 {
			return nil, fmt.Errorf("%s:%d: not YAML: %s", file, le.Mark.Line, le.Message)
		}
		return nil, fmt.Errorf("%s: not YAML: %w", file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s:%d: one YAML document is allowed", file, extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	c := &Config{CoalesceWindow: DefaultCoalesceWindow, MachineNotReadyAfter: DefaultMachineNotReadyAfter}
	var alertNodes []*yaml.Node
	declared := map[string]bool{} // provider names, also of providers with problems
	dir := filepath.Dir(file)
	d.fields(root, "", map[string]func(*yaml.Node, string){
		"coalesceWindow":       func(v *yaml.Node, p string) { c.CoalesceWindow = d.duration(v, p) },
		"machineNotReadyAfter": func(v *yaml.Node, p string) { c.MachineNotReadyAfter = d.duration(v, p) },
		"providers": func(v *yaml.Node, p string) {
			d.list(v, p, func(item *yaml.Node, p string) {
				pr, ok := d.provider(item, p, dir)
				if pr.Name != "" && declared[pr.Name] {
					d.errorf(item, p, "a second provider named %q", pr.Name)
				}
				declared[pr.Name] = true
				if ok {
					c.Providers = append(c.Providers, pr)
				}
			})
		},
		"alerts": func(v *yaml.Node, p string) {
			d.list(v, p, func(item *yaml.Node, _ string) { alertNodes = append(alertNodes, item) })
		},
	})
	names := map[string]bool{}
	for i, n := range alertNodes {
		p := fmt.Sprintf("alerts[%d]", i)
		if a := d.alert(n, p, declared); a != nil {
			if names[a.Name] {
				d.errorf(n, p, "a second alert named %q", a.Name)
			}
			names[a.Name] = true
			c.Alerts = append(c.Alerts, a)
		}
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// provider reads one provider; ok is false when it has problems.
func (d *decoder) provider(n *yaml.Node, path, dir string) (p *Provider, ok bool) {
	before := len(d.problems)
	p = &Provider{Timeout: DefaultTimeout, QueueSize: DefaultQueueSize}
	var address, addressFile, secretFile string
	var addressNode, addressFileNode, secretNode, channelNode, typeNode *yaml.Node
	if !d.fields(n, path, map[string]func(*yaml.Node, string){
		"name": func(v *yaml.Node, s string) { p.Name = d.name(v, s) },
		"type": func(v *yaml.Node, s string) { typeNode, p.Type = v, ProviderType(d.str(v, s)) },
		"address": func(v *yaml.Node, s string) {
			addressNode = v
			if address = d.str(v, s); address != "" {
				if _, err := checkURL(address); err != nil {
					d.errorf(v, s, "%v", err)
				}
			}
		},
		"addressFile": func(v *yaml.Node, s string) { addressFileNode, addressFile = v, d.str(v, s) },
		"secretFile":  func(v *yaml.Node, s string) { secretNode, secretFile = v, d.str(v, s) },
		"channel":     func(v *yaml.Node, s string) { channelNode, p.Channel = v, d.str(v, s) },
		"template":    func(v *yaml.Node, s string) { p.template = d.template(v, s) },
		"timeout":     func(v *yaml.Node, s string) { p.Timeout = d.duration(v, s) },
		"queueSize":   func(v *yaml.Node, s string) { p.QueueSize = d.integer(v, s, 1, maxQueueSize) },
	}) {
		return p, false
	}
	if p.Name == "" {
		d.errorf(n, path, "name is required")
	}
	if typeNode == nil {
		d.errorf(n, path, "type is required (%s)", typeList())
	} else if !slices.Contains(providerTypes, p.Type) {
		d.errorf(typeNode, path+".type", "unknown type %q (%s)", p.Type, typeList())
	}
	if address != "" && addressFile != "" {
		d.errorf(addressNode, path, "give address or addressFile, not both")
	}
	if addressFile != "" {
		address = d.readFile(addressFileNode, path+".addressFile", dir, addressFile)
		if address != "" {
			if _, err := checkURL(address); err != nil {
				// The address may carry a token: the error names the file only.
				d.errorf(addressFileNode, path+".addressFile", "the file %s does not hold an http(s) URL", addressFile)
			}
		}
	}
	if secretFile != "" {
		p.secret = d.readFile(secretNode, path+".secretFile", dir, secretFile)
	}
	if len(d.problems) > before {
		return p, false
	}
	p.address = address
	d.checkProvider(p, n, path, addressNode, secretNode, channelNode)
	return p, len(d.problems) == before
}

// checkProvider holds a provider's fields to what its type needs, and
// fills in the default address of the services that have one.
func (d *decoder) checkProvider(p *Provider, n *yaml.Node, path string, addressNode, secretNode, channelNode *yaml.Node) {
	need := func(ok bool, node *yaml.Node, format string, args ...any) {
		if !ok {
			if node == nil {
				node = n
			}
			d.errorf(node, path, format, args...)
		}
	}
	hasSecret, hasChannel := p.secret != "", p.Channel != ""
	urlIsCredential := func() {
		need(addressNode == nil, addressNode, "the webhook URL of a %s provider is its credential: put it in addressFile, not address", p.Type)
		need(p.address != "", nil, "addressFile is required: the file that holds the webhook URL")
	}
	switch p.Type {
	case Slack:
		if hasSecret { // the Web API with a bot token
			need(hasChannel, nil, "channel is required with a bot token in secretFile (chat.postMessage posts to a channel)")
			p.address = orDefault(p.address, "https://slack.com/api")
			return
		}
		need(!hasChannel, channelNode, "channel needs a bot token in secretFile; an incoming webhook posts to its own channel")
		urlIsCredential()
	case MSTeams, Discord, GoogleChat:
		need(!hasSecret, secretNode, "a %s provider takes no secretFile: its webhook URL is its credential", p.Type)
		need(!hasChannel, channelNode, "a %s provider takes no channel: its webhook posts to its own", p.Type)
		urlIsCredential()
	case Matrix:
		need(p.address != "", nil, "address is required: the homeserver's base URL, like https://matrix.example.org")
		need(hasSecret, nil, "secretFile is required: the file that holds the access token")
		need(strings.HasPrefix(p.Channel, "!") && strings.Contains(p.Channel, ":"), channelNode,
			"channel must be a room ID, like !abcdef:example.org (got %q)", p.Channel)
	case PagerDuty:
		need(hasSecret, nil, "secretFile is required: the file that holds the integration's routing key")
		need(!hasChannel, channelNode, "a pagerduty provider takes no channel")
		p.address = orDefault(p.address, "https://events.pagerduty.com")
	case Opsgenie:
		need(hasSecret, nil, "secretFile is required: the file that holds the API integration's key")
		need(!hasChannel, channelNode, "an opsgenie provider takes no channel")
		p.address = orDefault(p.address, "https://api.opsgenie.com")
	case Alertmanager:
		need(p.address != "", nil, "address is required: Alertmanager's base URL, like http://alertmanager:9093")
		need(!hasChannel, channelNode, "an alertmanager provider takes no channel")
	case Webhook:
		need(p.address != "", nil, "address or addressFile is required")
		need(!hasChannel, channelNode, "a webhook provider takes no channel")
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func typeList() string {
	s := make([]string, len(providerTypes))
	for i, t := range providerTypes {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

// checkURL accepts an absolute http(s) URL without credentials in it.
// Its error never quotes the URL.
func checkURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, errors.New("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("want an http or https URL")
	case u.Host == "":
		return nil, errors.New("the URL has no host")
	case u.User != nil:
		return nil, errors.New("the URL carries credentials: put it in addressFile")
	}
	return u, nil
}

// readFile reads a file the config names, trimmed of surrounding space.
// Its errors name the file, never its content.
func (d *decoder) readFile(n *yaml.Node, path, dir, name string) string {
	if !filepath.IsAbs(name) {
		name = filepath.Join(dir, name)
	}
	b, err := readSmall(name)
	if err != nil {
		d.errorf(n, path, "%v", err)
		return ""
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		d.errorf(n, path, "the file %s is empty", name)
	}
	return s
}

func readSmall(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > maxConfigSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxConfigSize)
	}
	return b, nil
}

var namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// name reads the name of a provider or alert: lower-case letters, digits,
// '.', '_' and '-', as Kubernetes names (it becomes a metric label).
func (d *decoder) name(n *yaml.Node, path string) string {
	s := d.str(n, path)
	if s != "" && !namePattern.MatchString(s) {
		d.errorf(n, path, "%q is not a valid name: up to 63 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit", s)
		return ""
	}
	return s
}

// alert reads one alert; nil when it has problems.
func (d *decoder) alert(n *yaml.Node, path string, providers map[string]bool) *Alert {
	before := len(d.problems)
	a := &Alert{}
	var providersNode *yaml.Node
	if !d.fields(n, path, map[string]func(*yaml.Node, string){
		"name": func(v *yaml.Node, s string) { a.Name = d.name(v, s) },
		"providers": func(v *yaml.Node, s string) {
			providersNode = v
			d.list(v, s, func(item *yaml.Node, s string) {
				name := d.str(item, s)
				if name != "" && !providers[name] {
					d.errorf(item, s, "no provider named %q", name)
				}
				a.Providers = append(a.Providers, name)
			})
		},
		"tenants": func(v *yaml.Node, s string) {
			d.fields(v, s, map[string]func(*yaml.Node, string){
				"names": func(v *yaml.Node, s string) { a.TenantNames = d.strs(v, s) },
				"selector": func(v *yaml.Node, s string) {
					sel, err := labels.Parse(d.str(v, s))
					if err != nil {
						d.errorf(v, s, "%v", err)
					}
					a.TenantSelector, a.hasSelector = sel, true
				},
			})
		},
		"severities": func(v *yaml.Node, s string) {
			d.list(v, s, func(item *yaml.Node, s string) {
				sev := Severity(d.str(item, s))
				if sev != SeverityInfo && sev != SeverityError {
					d.errorf(item, s, "unknown severity %q (info, error)", sev)
				}
				a.Severities = append(a.Severities, sev)
			})
		},
		"events": func(v *yaml.Node, s string) {
			d.list(v, s, func(item *yaml.Node, s string) {
				r := Reason(d.str(item, s))
				if !slices.Contains(Reasons, r) {
					d.errorf(item, s, "unknown event %q (%s)", r, reasonList())
				}
				a.Events = append(a.Events, r)
			})
		},
		"exclusionList": func(v *yaml.Node, s string) {
			d.list(v, s, func(item *yaml.Node, s string) {
				re, err := regexp.Compile(d.str(item, s))
				if err != nil {
					d.errorf(item, s, "not a regular expression: %v", err)
					return
				}
				a.ExclusionList = append(a.ExclusionList, re)
			})
		},
	}) {
		return nil
	}
	if a.Name == "" {
		d.errorf(n, path, "name is required")
	}
	if len(a.Providers) == 0 {
		node := providersNode
		if node == nil {
			node = n
		}
		d.errorf(node, path, "providers is required: the providers the alert sends to")
	}
	if len(d.problems) > before {
		return nil
	}
	return a
}

func reasonList() string {
	s := make([]string, len(Reasons))
	for i, r := range Reasons {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}
