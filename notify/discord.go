package notify

import "time"

// Discord takes an execute-webhook body with an embed:
// https://discord.com/developers/docs/resources/webhook#execute-webhook

type discordMessage struct {
	Username        string          `json:"username"`
	Embeds          []discordEmbed  `json:"embeds"`
	AllowedMentions discordMentions `json:"allowed_mentions"`
}

// discordMentions with no parse list keeps "@everyone" in an event's
// message from pinging anyone.
type discordMentions struct {
	Parse []string `json:"parse"`
}

type discordEmbed struct {
	Title       string         `json:"title"`
	Description string         `json:"description"`
	URL         string         `json:"url,omitempty"`
	Color       int            `json:"color"`
	Timestamp   string         `json:"timestamp"`
	Fields      []discordField `json:"fields,omitempty"`
}

type discordField struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Inline bool   `json:"inline"`
}

// Discord's limits on an embed.
const (
	discordMaxTitle       = 256
	discordMaxDescription = 4096
	discordMaxFieldValue  = 1024
)

func discordRequest(p *Provider, m *outgoing) (request, error) {
	color := 0x2EB67D
	if m.Severity == SeverityError {
		color = 0xE01E5A
	}
	e := discordEmbed{Title: truncate(m.Title(), discordMaxTitle), Description: truncate(m.text, discordMaxDescription),
		URL: m.URL, Color: color, Timestamp: m.Time.UTC().Format(time.RFC3339)}
	for _, kv := range m.facts() {
		e.Fields = append(e.Fields, discordField{Name: kv[0], Value: truncate(kv[1], discordMaxFieldValue), Inline: true})
	}
	return jsonRequest(p.address, discordMessage{Username: "RezusCloud", Embeds: []discordEmbed{e}, AllowedMentions: discordMentions{Parse: []string{}}})
}
