package notify

// Microsoft Teams takes an Adaptive Card in a message attachment, posted
// to a Workflows webhook ("Post to a channel when a webhook request is
// received"):
// https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/connectors-using

type teamsMessage struct {
	Type        string            `json:"type"` // "message"
	Attachments []teamsAttachment `json:"attachments"`
}

type teamsAttachment struct {
	ContentType string    `json:"contentType"`
	ContentURL  *string   `json:"contentUrl"` // null
	Content     teamsCard `json:"content"`
}

type teamsCard struct {
	Schema  string            `json:"$schema"`
	Type    string            `json:"type"` // "AdaptiveCard"
	Version string            `json:"version"`
	Body    []teamsElement    `json:"body"`
	Actions []teamsAction     `json:"actions,omitempty"`
	MSTeams map[string]string `json:"msteams,omitempty"`
}

// teamsElement is a TextBlock or a FactSet.
type teamsElement struct {
	Type   string      `json:"type"`
	Text   string      `json:"text,omitempty"`
	Size   string      `json:"size,omitempty"`
	Weight string      `json:"weight,omitempty"`
	Color  string      `json:"color,omitempty"`
	Wrap   bool        `json:"wrap,omitempty"`
	Facts  []teamsFact `json:"facts,omitempty"`
}

type teamsFact struct {
	Title string `json:"title"`
	Value string `json:"value"`
}

type teamsAction struct {
	Type  string `json:"type"` // "Action.OpenUrl"
	Title string `json:"title"`
	URL   string `json:"url"`
}

// teamsCardVersion is the newest Adaptive Card version Teams renders.
const teamsCardVersion = "1.4"

func teamsRequest(p *Provider, m *outgoing) (request, error) {
	color := "Good"
	if m.Severity == SeverityError {
		color = "Attention"
	}
	card := teamsCard{
		Schema: "http://adaptivecards.io/schemas/adaptive-card.json", Type: "AdaptiveCard", Version: teamsCardVersion,
		Body: []teamsElement{
			{Type: "TextBlock", Text: m.Title(), Size: "Medium", Weight: "Bolder", Color: color, Wrap: true},
			{Type: "TextBlock", Text: truncate(m.text, 20000), Wrap: true},
		},
		MSTeams: map[string]string{"width": "Full"},
	}
	if facts := teamsFacts(m.Notification); len(facts) > 0 {
		card.Body = append(card.Body, teamsElement{Type: "FactSet", Facts: facts})
	}
	if m.URL != "" {
		card.Actions = []teamsAction{{Type: "Action.OpenUrl", Title: "Open in RezusCloud", URL: m.URL}}
	}
	return jsonRequest(p.address, teamsMessage{Type: "message", Attachments: []teamsAttachment{{
		ContentType: "application/vnd.microsoft.card.adaptive", Content: card,
	}}})
}

func teamsFacts(m *Notification) []teamsFact {
	var f []teamsFact
	for _, kv := range m.facts() {
		f = append(f, teamsFact{Title: kv[0], Value: kv[1]})
	}
	return f
}
