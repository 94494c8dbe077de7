package backend

import (
	"errors"
	"log/slog"
	"time"
)

// Source says how a person or a program came in.
type Source string

// The sources of an identity.
const (
	// SourceToken: a token of the tokens file, or an ephemeral one.
	SourceToken Source = "token"
	// SourceLocal: a user of the users file, with a password.
	SourceLocal Source = "local"
	// SourceOIDC: a person the organisation's OpenID Connect provider
	// vouched for.
	SourceOIDC Source = "oidc"
	// SourceNone: nobody, on a server that runs without credentials.
	SourceNone Source = "none"
)

// Identity is who made a request and what they may do. Names are not
// secret and appear in logs, the audit log and lock records.
type Identity struct {
	// Name is the token's name, the local user's name, or for OIDC the
	// e-mail address (the subject when there is none).
	Name string
	Role Role
	// Source says how the caller came in; empty reads as SourceToken.
	Source Source
	// Subject and Email are the OIDC subject and e-mail, when Source is
	// SourceOIDC.
	Subject string
	Email   string
	// Expires is when the credential ends; zero for never.
	Expires time.Time
}

// Anonymous is the identity of every request to a server that runs
// without a tokens file (which it only does on loopback).
var Anonymous = Identity{Name: "anonymous", Role: RoleAdmin, Source: SourceNone}

// Who returns the attributes that name id in a log or audit line: "who"
// and "source", and for OIDC "subject" and "email".
func (id Identity) Who() []any {
	src := id.Source
	if src == "" {
		src = SourceToken
	}
	attrs := []any{"who", id.Name, "source", string(src)}
	if id.Subject != "" {
		attrs = append(attrs, "subject", id.Subject)
	}
	if id.Email != "" {
		attrs = append(attrs, "email", id.Email)
	}
	return attrs
}

// WhoAttr returns Who as one slog group attribute.
func (id Identity) WhoAttr() slog.Attr { return slog.Group("identity", id.Who()...) }

// CredentialCheck is one more way in beside the tokens (Tokens.AddCheck),
// such as a login's bearer token or an OIDC ID token. name is the basic
// auth user name, empty for a bearer. It returns ErrNotMine for a secret
// it does not know, and any other error for one it knows and refuses (an
// expired one, say), which the caller sees.
type CredentialCheck func(name, secret string) (Identity, error)

// ErrNotMine is what a CredentialCheck returns for a secret that is not
// one of its own.
var ErrNotMine = errors.New("not this check's credential")

// AddCheck adds a way in: a secret that no token matches is given to
// each check in turn. It also closes the server (Require).
func (t *Tokens) AddCheck(c CredentialCheck) {
	t.mu.Lock()
	t.checks = append(t.checks, c)
	t.closed = true
	t.mu.Unlock()
}

// Require makes t refuse requests without valid credentials even
// without a tokens file: a server with users or single sign-on is
// closed.
func (t *Tokens) Require() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}

// checkOthers gives secret to the checks of AddCheck.
func (t *Tokens) checkOthers(name, secret string) (Identity, error) {
	t.mu.RLock()
	checks := t.checks
	t.mu.RUnlock()
	for _, c := range checks {
		id, err := c(name, secret)
		if errors.Is(err, ErrNotMine) {
			continue
		}
		return id, err
	}
	return Identity{}, errBadCredentials
}

// AuditRefused audits a refused credential or login, msg with attrs,
// of client (its address, or the name it gave) and of kind (a word for
// why): the first of a kind from a client in a minute is written as it
// comes, and the others in that minute make one line at its end that
// counts them, so that a client repeating a refusal cannot flood the
// audit log.
func (s *Server) AuditRefused(msg, client, kind string, attrs ...any) {
	s.refused.warn(s.Audit(), msg, client, kind, attrs...)
}

// Audit returns the audit log (SetAudit), or the server's log without
// one. Every identity event goes there: logins, failed logins, logouts,
// refused expired credentials and role changes, each naming the person
// with Identity.Who.
func (s *Server) Audit() *slog.Logger {
	if a := s.state.opts.Audit; a != nil {
		return a
	}
	return s.log
}
