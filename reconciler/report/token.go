package report

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// Token is a forge access token. It prints, logs and encodes as
// "[redacted]" (or "" when empty), so options that hold one may be logged.
type Token string

const redacted = "[redacted]"

func (t Token) show() string {
	if t == "" {
		return ""
	}
	return redacted
}

// String hides the token.
func (t Token) String() string { return t.show() }

// GoString hides the token from %#v.
func (t Token) GoString() string { return t.show() }

// LogValue hides the token from slog.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.show()) }

// MarshalText hides the token from encoders.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.show()), nil }

// The environment variables that hold the tokens of the forge reporters.
// Each has a _FILE variant naming a file that holds the token.
const (
	EnvGitHubToken = "REZUSCLOUD_GITHUB_TOKEN"
	EnvGitLabToken = "REZUSCLOUD_GITLAB_TOKEN"
)

// TokenFrom reads a token from file when file is set, and otherwise from
// the environment variable envVar or the file named by envVar_FILE
// (setting both of those is an error). One trailing newline (or CRLF) and
// surrounding spaces are dropped. Nothing set is an error wrapping
// ErrNoToken. Errors name the variable and the file, never the value.
// getenv is os.Getenv when nil.
func TokenFrom(file, envVar string, getenv func(string) string) (Token, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if file != "" {
		return tokenFile(file, "token file")
	}
	v, f := getenv(envVar), getenv(envVar+"_FILE")
	switch {
	case v != "" && f != "":
		return "", fmt.Errorf("%s and %s_FILE are both set: use one", envVar, envVar)
	case f != "":
		return tokenFile(f, envVar+"_FILE")
	case v != "":
		t := strings.TrimSpace(v)
		if t == "" || strings.ContainsAny(t, "\r\n") {
			return "", fmt.Errorf("%s: the token must be one line of non-blank text", envVar)
		}
		return Token(t), nil
	}
	return "", fmt.Errorf("%w: set a token file, %s or %s_FILE", ErrNoToken, envVar, envVar)
}

func tokenFile(path, what string) (Token, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		// The error of os.ReadFile names the file and the reason only.
		return "", fmt.Errorf("%s: %w", what, err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("%s %s is empty", what, path)
	}
	if strings.ContainsAny(t, "\r\n") {
		return "", fmt.Errorf("%s %s holds more than one line: it must hold the token alone", what, path)
	}
	return Token(t), nil
}
