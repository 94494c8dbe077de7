package sso

import (
	"context"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Session is a signed-in person's tokens, kept on the server for the
// life of a dashboard session: Check re-checks the role when the ID token
// has expired, with the refresh token. It is safe for concurrent use.
type Session struct {
	c  *Client
	mu sync.Mutex
	l  *Login
}

// NewSession keeps l, a Login that Finish returned.
func (c *Client) NewSession(l *Login) *Session { return &Session{c: c, l: l} }

// Login returns the session's current login.
func (s *Session) Login() *Login {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l
}

// Refreshable reports whether the provider gave a refresh token.
func (s *Session) Refreshable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l.refresh != nil && s.l.refresh.RefreshToken != ""
}

// Check returns the login as of now: the same while its ID token is
// valid; after that, a new one from the provider's refresh, whose groups
// give the role again. It fails when the ID token expired and there is
// no refresh token, when the provider refuses the refresh, and with a
// *NoRoleError when the person's groups no longer give a role. A Check
// that refreshes waits for the provider, at most timeout.
func (s *Session) Check(ctx context.Context, now time.Time, timeout time.Duration) (*Login, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Before(s.l.Expires) {
		return s.l, nil
	}
	if s.l.refresh == nil || s.l.refresh.RefreshToken == "" {
		return nil, &Error{Reason: "expired", Msg: "the ID token expired and the provider gave no refresh token; sign in again"}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := s.c
	tok, err := c.oauth.TokenSource(oidc.ClientContext(ctx, c.cfg.HTTPClient), &oauth2.Token{RefreshToken: s.l.refresh.RefreshToken}).Token()
	if err != nil {
		return nil, &Error{Reason: "refresh", Msg: "the provider refused the refresh: " + exchangeError(err)}
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, &Error{Reason: "refresh", Msg: "the provider's refresh holds no ID token"}
	}
	l, err := c.verify(ctx, c.web, raw, "")
	if err != nil {
		return nil, err
	}
	if l.Subject != s.l.Subject {
		return nil, &Error{Reason: "subject", Msg: "the refreshed ID token names another subject"}
	}
	if tok.RefreshToken == "" {
		tok.RefreshToken = s.l.refresh.RefreshToken
	}
	l.refresh, l.client, l.Next = tok, s.l.client, s.l.Next
	s.l = l
	return l, nil
}
