package notify

import (
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v4"
)

// Notification is one message: the latest of the events it stands for,
// and how many there were. A provider's template renders it.
type Notification struct {
	Event
	// Count is how many events the message stands for: 1, or more when
	// repeats were coalesced.
	Count int
	// Provider names the provider the message goes to.
	Provider string
}

// Title is a one-line summary: what happened, where, and how often.
func (n *Notification) Title() string {
	var b strings.Builder
	b.WriteString(string(n.Reason))
	if n.Tenant != "" {
		b.WriteString(" in tenant " + n.Tenant)
	}
	if n.Machine != "" {
		b.WriteString(", machine " + n.Machine)
	}
	if n.Replica != "" {
		b.WriteString(", replica " + n.Replica)
	}
	if n.Count > 1 {
		fmt.Fprintf(&b, " (%d times)", n.Count)
	}
	return b.String()
}

// defaultTemplate is the text of a message when its provider sets no
// template of its own; defaultBody is that of the services that show the
// title apart (Teams, Discord and the incident tools).
const (
	defaultTemplate = "{{.Title}}\n" + defaultBody
	defaultBody     = `{{.Message}}
{{- with .Commit.SHA}}
Commit {{$.Commit.Short}}{{with $.Commit.Subject}}: {{.}}{{end}}
{{- end}}
{{- with .URL}}
{{.}}
{{- end}}`
)

var (
	defaultTmpl     = template.Must(template.New("default").Option("missingkey=error").Parse(defaultTemplate))
	defaultBodyTmpl = template.Must(template.New("default").Option("missingkey=error").Parse(defaultBody))
)

// titled are the types whose payload shows the title apart from the text.
var titled = map[ProviderType]bool{MSTeams: true, Discord: true, PagerDuty: true, Opsgenie: true, Alertmanager: true}

// sampleNotification is what a template is tried on when the config is
// loaded, so that a template that fails on every message fails at start.
var sampleNotification = Notification{
	Event: Event{Reason: ReconcileFailed, Severity: SeverityError, Tenant: "tenant", Labels: map[string]string{"env": "prod"},
		Machine: "machine", Replica: "replica", Commit: Commit{SHA: strings.Repeat("0", 40), Subject: "subject"},
		Message: "message", URL: "https://rezuscloud.example.com/tenants/tenant", Time: time.Unix(0, 0).UTC()},
	Count: 2, Provider: "provider",
}

// template reads a provider's message template and tries it.
func (d *decoder) template(n *yaml.Node, path string) *template.Template {
	s := d.str(n, path)
	if s == "" {
		return nil
	}
	t, err := template.New("message").Option("missingkey=error").Parse(s)
	if err != nil {
		d.errorf(n, path, "not a text/template: %v", err)
		return nil
	}
	if _, err := render(t, &sampleNotification); err != nil {
		d.errorf(n, path, "the template fails: %v", err)
		return nil
	}
	return t
}

// render runs t on m; the text is trimmed of surrounding space.
func render(t *template.Template, m *Notification) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, m); err != nil {
		return "", err
	}
	return strings.TrimSpace(b.String()), nil
}

// text renders the message with the provider's template, or the default
// one. A template that fails on this message falls back to the default,
// so that the message still goes out.
func (p *Provider) text(m *Notification) (string, error) {
	def := defaultTmpl
	if titled[p.Type] {
		def = defaultBodyTmpl
	}
	if p.template != nil {
		s, err := render(p.template, m)
		if err == nil {
			return s, nil
		}
		d, _ := render(def, m)
		return d, fmt.Errorf("the template of provider %s fails: %w", p.Name, err)
	}
	return render(def, m)
}

// truncate cuts s to at most n runes, marking the cut with an ellipsis.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// facts are the event's particulars as name and value, for the services
// that show them apart from the text.
func (n *Notification) facts() [][2]string {
	var f [][2]string
	add := func(name, value string) {
		if value != "" {
			f = append(f, [2]string{name, value})
		}
	}
	add("Tenant", n.Tenant)
	add("Machine", n.Machine)
	add("Replica", n.Replica)
	if n.Commit.SHA != "" {
		add("Commit", strings.TrimSpace(n.Commit.Short()+" "+n.Commit.Subject))
	}
	if n.Count > 1 {
		add("Count", strconv.Itoa(n.Count))
	}
	return f
}
