package notify

import (
	"net/http"
	"net/url"
	"strings"
)

// Opsgenie takes alerts through its Alert API with the key of an API
// integration (Authorization: GenieKey …): POST /v2/alerts creates one,
// deduplicated by alias (https://docs.opsgenie.com/docs/alert-api#create-alert);
// a recovery closes the alert of its family,
// POST /v2/alerts/{alias}/close?identifierType=alias.

type opsgenieAlert struct {
	Message     string            `json:"message"`
	Alias       string            `json:"alias"`
	Description string            `json:"description"`
	Details     map[string]string `json:"details"`
	Tags        []string          `json:"tags"`
	Entity      string            `json:"entity,omitempty"`
	Source      string            `json:"source"`
	Priority    string            `json:"priority"`
}

type opsgenieClose struct {
	Source string `json:"source"`
	Note   string `json:"note"`
}

// Opsgenie's limits.
const (
	opsgenieMaxMessage     = 130
	opsgenieMaxDescription = 15000
	opsgenieMaxNote        = 25000
)

func opsgenieRequest(p *Provider, m *outgoing) (request, error) {
	base := strings.TrimSuffix(p.address, "/") + "/v2/alerts"
	var r request
	var err error
	if len(resolves(m.Reason)) > 0 {
		u := base + "/" + url.PathEscape(dedupKey(m.Notification)) + "/close?identifierType=alias"
		r, err = jsonRequest(u, opsgenieClose{Source: "rezuscloud", Note: truncate(m.text, opsgenieMaxNote)})
	} else {
		priority := "P5"
		if m.Severity == SeverityError {
			priority = "P2"
		}
		r, err = jsonRequest(base, opsgenieAlert{Message: truncate(m.Title(), opsgenieMaxMessage), Alias: dedupKey(m.Notification),
			Description: truncate(m.text, opsgenieMaxDescription), Details: details(m.Notification),
			Tags: []string{"rezuscloud", string(m.Reason)}, Entity: m.Tenant, Source: "rezuscloud", Priority: priority})
	}
	if err != nil {
		return r, err
	}
	r.method = http.MethodPost
	r.header.Set("Authorization", "GenieKey "+p.secret)
	return r, nil
}
