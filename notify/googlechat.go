package notify

// Google Chat takes a message with text, posted to a space's incoming
// webhook: https://developers.google.com/workspace/chat/quickstart/webhooks

type googleChatMessage struct {
	Text string `json:"text"`
}

// googleChatMaxText is within a Chat message's limit of 4,096 characters.
const googleChatMaxText = 4000

func googleChatRequest(p *Provider, m *outgoing) (request, error) {
	r, err := jsonRequest(p.address, googleChatMessage{Text: truncate(m.text, googleChatMaxText)})
	if err != nil {
		return r, err
	}
	r.header.Set("Content-Type", "application/json; charset=UTF-8")
	return r, nil
}
