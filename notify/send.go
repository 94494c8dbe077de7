package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/rezuscloud/rezuscloud/internal/redact"
	"github.com/rezuscloud/rezuscloud/internal/version"
)

// request is one HTTP request that delivers a message.
type request struct {
	method, url string
	header      http.Header
	body        []byte
	// check, when set, reads a 2xx answer that may still tell a failure
	// (Slack's Web API answers 200 with "ok": false).
	check func(body []byte) error
}

// outgoing is a message as a builder sees it.
type outgoing struct {
	*Notification
	// text is the message rendered with the provider's template.
	text string
	// txn identifies the message, the same across its retries and unique
	// across restarts (Matrix's transaction ID).
	txn string
	now time.Time
}

// builder makes the request that sends m to a provider of one type.
type builder func(p *Provider, m *outgoing) (request, error)

var builders = map[ProviderType]builder{
	Slack:        slackRequest,
	MSTeams:      teamsRequest,
	Discord:      discordRequest,
	GoogleChat:   googleChatRequest,
	Matrix:       matrixRequest,
	PagerDuty:    pagerDutyRequest,
	Opsgenie:     opsgenieRequest,
	Alertmanager: alertmanagerRequest,
	Webhook:      webhookRequest,
}

// jsonRequest is a POST of v as JSON to u.
func jsonRequest(u string, v any) (request, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return request{}, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return request{method: http.MethodPost, url: u, header: h, body: b}, nil
}

// deliveryError is why a message was not delivered. Its text holds no
// secret of the provider: addresses and keys are redacted from it.
type deliveryError struct {
	msg string
	// permanent: retrying cannot help (the service refused the request).
	permanent bool
	// after is how long the service asked to wait (Retry-After), or 0.
	after time.Duration
}

func (e *deliveryError) Error() string { return e.msg }

// maxErrorBody bounds how much of an answer an error quotes.
const maxErrorBody = 256

// do sends r with p's timeout. Its error is a *deliveryError.
func do(ctx context.Context, client *http.Client, p *Provider, red *redact.Redactor, r request) error {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, r.method, r.url, bytes.NewReader(r.body))
	if err != nil {
		return &deliveryError{msg: "cannot make the request", permanent: true}
	}
	for k, v := range r.header {
		hr.Header[k] = v
	}
	hr.Header.Set("User-Agent", "rezuscloud/"+version.Version)
	resp, err := client.Do(hr)
	if err != nil {
		return &deliveryError{msg: red.String(transportError(err))}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		if r.check != nil {
			if err := r.check(body); err != nil {
				return &deliveryError{msg: red.String(err.Error()), permanent: true}
			}
		}
		return nil
	case code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code >= 500:
		return &deliveryError{msg: red.String(statusText(code, body)), after: retryAfter(resp.Header.Get("Retry-After"))}
	default:
		return &deliveryError{msg: red.String(statusText(code, body)), permanent: true}
	}
}

// transportError describes a failed round trip without the URL, which
// may carry a token.
func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return ue.Op + ": timed out"
		}
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}

// statusText is an answer's status and the start of its body, on one line.
func statusText(code int, body []byte) string {
	s := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, string(body))
	s = truncate(strings.Join(strings.Fields(s), " "), maxErrorBody)
	if s == "" {
		return fmt.Sprintf("HTTP %d", code)
	}
	return fmt.Sprintf("HTTP %d: %s", code, s)
}

// retryAfter reads a Retry-After header in seconds (Discord's may have a
// fraction); 0 when absent, a date, or not a positive number.
func retryAfter(h string) time.Duration {
	f, err := strconv.ParseFloat(strings.TrimSpace(h), 64)
	if err != nil || !(f > 0) || f > 24*3600 {
		return 0
	}
	return time.Duration(math.Ceil(f * float64(time.Second)))
}
