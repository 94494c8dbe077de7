package notify

import (
	"net/http"
	"net/url"
	"strings"
)

// Matrix takes an m.room.message event, sent with the client-server API:
// PUT /_matrix/client/v3/rooms/{roomId}/send/m.room.message/{txnId}
// (https://spec.matrix.org/latest/client-server-api/#put_matrixclientv3roomsroomidsendeventtypetxnid).
// The transaction ID stays the same across retries, so that the server
// takes a retried message once.

type matrixMessage struct {
	// MsgType is m.notice, the type for messages that bots send.
	MsgType string `json:"msgtype"`
	Body    string `json:"body"`
}

func matrixRequest(p *Provider, m *outgoing) (request, error) {
	u := strings.TrimSuffix(p.address, "/") + "/_matrix/client/v3/rooms/" + url.PathEscape(p.Channel) +
		"/send/m.room.message/" + url.PathEscape(m.txn)
	r, err := jsonRequest(u, matrixMessage{MsgType: "m.notice", Body: m.text})
	if err != nil {
		return r, err
	}
	r.method = http.MethodPut
	r.header.Set("Authorization", "Bearer "+p.secret)
	return r, nil
}
