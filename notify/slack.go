package notify

import (
	"encoding/json"
	"errors"
	"strings"
)

// slackMessage is the body of an incoming webhook and of chat.postMessage
// (https://api.slack.com/messaging/webhooks,
// https://api.slack.com/methods/chat.postMessage).
type slackMessage struct {
	Channel     string `json:"channel,omitempty"`
	Text        string `json:"text"`
	UnfurlLinks bool   `json:"unfurl_links"`
}

// slackEscape escapes the three characters Slack's mrkdwn reserves.
var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// slackMaxText is below chat.postMessage's limit of 40,000 characters.
const slackMaxText = 39000

func slackRequest(p *Provider, m *outgoing) (request, error) {
	msg := slackMessage{Text: truncate(slackEscape.Replace(m.text), slackMaxText)}
	if p.secret == "" { // an incoming webhook
		return jsonRequest(p.address, msg)
	}
	msg.Channel = p.Channel
	r, err := jsonRequest(strings.TrimSuffix(p.address, "/")+"/chat.postMessage", msg)
	if err != nil {
		return r, err
	}
	r.header.Set("Content-Type", "application/json; charset=utf-8")
	r.header.Set("Authorization", "Bearer "+p.secret)
	r.check = slackOK
	return r, nil
}

// slackOK reads a Web API answer, which is 200 with "ok": false and an
// error code when the call failed.
func slackOK(body []byte) error {
	var a struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return errors.New("slack answered with something other than its JSON")
	}
	if !a.OK {
		return errors.New("slack refused the message: " + truncate(a.Error, 100))
	}
	return nil
}
