package notify

import (
	"strings"
	"testing"
	"time"
)

const secretURL = "https://hooks.slack.example/services/T000/B000/s3cr3t-t0ken-in-the-path"

// TestLoadConfig: a config with every field reads into the values given,
// with the files it names read relative to it and the defaults filled in.
func TestLoadConfig(t *testing.T) {
	path := writeFiles(t, map[string]string{
		"slack-url": secretURL + "\n",
		"pd-key":    "R0UT1NGKEY0123456789\n",
		"notifications.yaml": `
coalesceWindow: 2m
providers:
  - name: team-slack
    type: slack
    addressFile: slack-url
    template: "{{.Reason}} {{.Tenant}}"
    timeout: 3s
    queueSize: 10
  - name: oncall
    type: pagerduty
    secretFile: pd-key
alerts:
  - name: prod
    providers: [team-slack, oncall]
    tenants:
      names: [a, b]
      selector: env=prod
    severities: [error]
    events: [ReconcileFailed, Recovered]
    exclusionList: ["^dry run"]
`})
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.CoalesceWindow != 2*time.Minute || c.MachineNotReadyAfter != DefaultMachineNotReadyAfter {
		t.Errorf("windows %v, %v; want 2m and the default", c.CoalesceWindow, c.MachineNotReadyAfter)
	}
	s, pd := c.Provider("team-slack"), c.Provider("oncall")
	if s == nil || pd == nil || len(c.Providers) != 2 {
		t.Fatalf("providers %v", c.Providers)
	}
	if s.Type != Slack || s.address != secretURL || s.Timeout != 3*time.Second || s.QueueSize != 10 || s.template == nil {
		t.Errorf("slack provider %+v", *s)
	}
	if pd.secret != "R0UT1NGKEY0123456789" || pd.address != "https://events.pagerduty.com" || pd.Timeout != DefaultTimeout || pd.QueueSize != DefaultQueueSize {
		t.Errorf("pagerduty provider: secret read %v, address %q, timeout %v, queue %d", pd.secret != "", pd.address, pd.Timeout, pd.QueueSize)
	}
	a := c.Alerts[0]
	if a.Name != "prod" || strings.Join(a.Providers, ",") != "team-slack,oncall" || len(a.TenantNames) != 2 || !a.hasSelector ||
		len(a.Severities) != 1 || len(a.Events) != 2 || len(a.ExclusionList) != 1 {
		t.Errorf("alert %+v", *a)
	}
}

// TestAlertMatches: each filter of an alert lets through what it names
// and nothing else.
func TestAlertMatches(t *testing.T) {
	path := writeFiles(t, map[string]string{"notifications.yaml": `
providers: [{name: w, type: webhook, address: "http://127.0.0.1:1/hook"}]
alerts:
  - {name: all, providers: [w]}
  - {name: names, providers: [w], tenants: {names: [a]}}
  - {name: selector, providers: [w], tenants: {selector: "env in (prod)"}}
  - {name: both, providers: [w], tenants: {names: [x], selector: "env=prod"}}
  - {name: errors, providers: [w], severities: [error]}
  - {name: events, providers: [w], events: [Drifted]}
  - {name: exclude, providers: [w], exclusionList: ["sim cloud", "^nothing$"]}
`})
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*Alert{}
	for _, a := range c.Alerts {
		byName[a.Name] = a
	}
	failed := event(ReconcileFailed, "a")
	staging := event(ReconcileFailed, "b")
	staging.Labels = map[string]string{"env": "staging"}
	server := Event{Reason: CommitRefused, Severity: SeverityError, Message: "unsigned"}
	drift := event(Drifted, "c")
	drift.Message = "the instance type changed"
	cases := []struct {
		alert string
		ev    Event
		want  bool
	}{
		{"all", failed, true}, {"all", server, true},
		{"names", failed, true}, {"names", staging, false}, {"names", server, false},
		{"selector", failed, true}, {"selector", staging, false}, {"selector", server, false},
		{"both", failed, true}, {"both", staging, false},
		{"errors", failed, true}, {"errors", event(Recovered, "a"), false},
		{"events", drift, true}, {"events", failed, false},
		{"exclude", failed, false}, {"exclude", drift, true},
	}
	for _, tc := range cases {
		if got := byName[tc.alert].Matches(tc.ev); got != tc.want {
			t.Errorf("alert %s, %s of %q: matches %v, want %v", tc.alert, tc.ev.Reason, tc.ev.Tenant, got, tc.want)
		}
	}
}

// TestConfigErrors: every mistake is refused with the file, its line,
// the field's path and what is wrong; several mistakes are all reported.
func TestConfigErrors(t *testing.T) {
	files := map[string]string{"url": "https://chat.example/hook?token=abc123xyz", "empty": "\n", "key": "k3y-value"}
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown top field", "provider: []\n", []string{":1: unknown field \"provider\" (known: alerts, coalesceWindow, machineNotReadyAfter, providers)"}},
		{"unknown provider field", "providers:\n  - name: a\n    type: webhook\n    address: http://127.0.0.1/\n    adress: x\n",
			[]string{":5: providers[0]: unknown field \"adress\""}},
		{"unknown type", "providers:\n  - name: a\n    type: slak\n", []string{":3: providers[0].type: unknown type \"slak\" (slack, msteams"}},
		{"missing type and name", "providers:\n  - channel: x\n", []string{":2: providers[0]: name is required", ":2: providers[0]: type is required"}},
		{"bad duration", "coalesceWindow: 5 minutes\n", []string{":1: coalesceWindow: \"5 minutes\" is not a positive duration"}},
		{"negative duration", "machineNotReadyAfter: -1s\n", []string{":1: machineNotReadyAfter: \"-1s\" is not a positive duration"}},
		{"bad queue", "providers:\n  - {name: a, type: webhook, address: \"http://127.0.0.1/\", queueSize: 0}\n", []string{":2: providers[0].queueSize: \"0\" is not a whole number from 1 to"}},
		{"inline secret URL", "providers:\n  - name: a\n    type: slack\n    address: https://hooks.slack.com/services/T/B/x\n",
			[]string{":4: providers[0]: the webhook URL of a slack provider is its credential: put it in addressFile"}},
		{"URL with credentials", "providers:\n  - {name: a, type: webhook, address: \"https://u:p@example.com/\"}\n", []string{":2: providers[0].address: the URL carries credentials"}},
		{"not http", "providers:\n  - {name: a, type: alertmanager, address: \"ftp://example.com/\"}\n", []string{":2: providers[0].address: want an http or https URL"}},
		{"missing file", "providers:\n  - {name: a, type: discord, addressFile: nope}\n", []string{":2: providers[0].addressFile: open ", "nope: no such file"}},
		{"empty secret", "providers:\n  - {name: a, type: pagerduty, secretFile: empty}\n", []string{":2: providers[0].secretFile: the file ", "empty is empty"}},
		{"both addresses", "providers:\n  - {name: a, type: webhook, address: \"http://127.0.0.1/\", addressFile: url}\n", []string{"give address or addressFile, not both"}},
		{"slack channel without token", "providers:\n  - {name: a, type: slack, addressFile: url, channel: ops}\n", []string{"channel needs a bot token in secretFile"}},
		{"slack bot without channel", "providers:\n  - {name: a, type: slack, secretFile: key}\n", []string{"channel is required with a bot token"}},
		{"matrix room", "providers:\n  - {name: a, type: matrix, address: \"https://m.example\", secretFile: key, channel: \"#ops:m.example\"}\n",
			[]string{":2: providers[0]: channel must be a room ID"}},
		{"pagerduty without key", "providers:\n  - {name: a, type: pagerduty}\n", []string{"secretFile is required: the file that holds the integration's routing key"}},
		{"teams with secret", "providers:\n  - {name: a, type: msteams, addressFile: url, secretFile: key}\n", []string{"a msteams provider takes no secretFile"}},
		{"bad template", "providers:\n  - {name: a, type: webhook, address: \"http://127.0.0.1/\", template: \"{{.Tenant\"}\n",
			[]string{":2: providers[0].template: not a text/template"}},
		{"template on a missing field", "providers:\n  - {name: a, type: webhook, address: \"http://127.0.0.1/\", template: \"{{.Cluster}}\"}\n",
			[]string{":2: providers[0].template: the template fails", "Cluster"}},
		{"bad name", "providers:\n  - {name: Team Slack, type: webhook, address: \"http://127.0.0.1/\"}\n", []string{":2: providers[0].name: \"Team Slack\" is not a valid name"}},
		{"duplicate provider", "providers:\n  - {name: a, type: webhook, address: \"http://127.0.0.1/\"}\n  - {name: a, type: webhook, address: \"http://127.0.0.1/\"}\n",
			[]string{":3: providers[1]: a second provider named \"a\""}},
		{"duplicate key", "providers: []\nproviders: []\n", []string{":2: field \"providers\" given twice"}},
		{"alert errors", `providers: [{name: a, type: webhook, address: "http://127.0.0.1/"}]
alerts:
  - name: x
    providers: [a, b]
    severities: [warning]
    events: [Failed]
    tenants: {selector: "env in prod"}
    exclusionList: ["("]
  - {name: y}
`, []string{":4: alerts[0].providers[1]: no provider named \"b\"", ":5: alerts[0].severities[0]: unknown severity \"warning\" (info, error)",
			":6: alerts[0].events[0]: unknown event \"Failed\" (ReconcileFailed,", ":7: alerts[0].tenants.selector: label selector",
			":8: alerts[0].exclusionList[0]: not a regular expression", ":9: alerts[1]: providers is required"}},
		{"wrong shape", "providers: {name: a}\n", []string{":1: providers: want a list, got a mapping"}},
		{"alias", "a: &x 5m\ncoalesceWindow: *x\n", []string{":1: unknown field \"a\"", ":2: coalesceWindow: aliases are not supported here"}},
		{"two documents", "providers: []\n---\nalerts: []\n", []string{":2: one YAML document is allowed"}},
		{"not YAML", "providers: [\n", []string{"notifications.yaml:2: not YAML: did not find expected node content"}},
		{"empty", "", []string{"the notifications config is empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := map[string]string{"notifications.yaml": tc.yaml}
			for k, v := range files {
				f[k] = v
			}
			_, err := LoadConfig(writeFiles(t, f))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwants %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), "notifications.yaml") {
				t.Errorf("error %q does not name the file", err)
			}
			for _, secret := range []string{"abc123xyz", "k3y-value"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q quotes a secret", err)
				}
			}
		})
	}
}

// TestConfigErrorsKeepSecrets: a file that holds no URL is refused
// without quoting what it holds.
func TestConfigErrorsKeepSecrets(t *testing.T) {
	path := writeFiles(t, map[string]string{"url": "hooks.slack.com/services/T/B/s3cr3t-t0ken",
		"notifications.yaml": "providers:\n  - {name: a, type: slack, addressFile: url}\n"})
	_, err := LoadConfig(path)
	if err == nil || !strings.Contains(err.Error(), ":2: providers[0].addressFile: the file ") || !strings.Contains(err.Error(), "does not hold an http(s) URL") {
		t.Fatalf("error %v", err)
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("error %q quotes the file's content", err)
	}
}
