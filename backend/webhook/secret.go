package webhook

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// SecretEnv is the environment variable that holds the webhook secret.
const SecretEnv = "REZUSCLOUD_WEBHOOK_SECRET"

// maxSecretFile bounds a secret file; a larger one is a wrong file.
const maxSecretFile = 64 << 10

// ErrNoSecret is returned by SecretFrom when neither a file nor the
// environment gives a secret, so a caller can tell "webhooks not
// configured" from a broken configuration.
var ErrNoSecret = errors.New("no webhook secret: set " + SecretEnv + " or give --webhook-secret-file")

// SecretFrom returns the webhook secret: the content of file when file is
// not "", else the value of REZUSCLOUD_WEBHOOK_SECRET as getenv reports
// it. One trailing newline ("\n" or "\r\n") is removed, since editors and
// `echo` add one. An empty secret is an error: ErrNoSecret when nothing
// was configured, an error naming the file when the file is empty.
func SecretFrom(file string, getenv func(string) string) ([]byte, error) {
	if file != "" {
		return secretFromFile(file)
	}
	v := trimNewline(getenv(SecretEnv))
	if v == "" {
		return nil, ErrNoSecret
	}
	return []byte(v), nil
}

func secretFromFile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("webhook secret file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, fmt.Errorf("webhook secret file %s: %w", file, err)
	}
	if len(b) > maxSecretFile {
		return nil, fmt.Errorf("webhook secret file %s: over %d bytes; give a file that holds only the secret", file, maxSecretFile)
	}
	s := trimNewline(string(b))
	if s == "" {
		return nil, fmt.Errorf("webhook secret file %s is empty; webhooks need a secret", file)
	}
	return []byte(s), nil
}

func trimNewline(s string) string {
	if t, ok := strings.CutSuffix(s, "\r\n"); ok {
		return t
	}
	return strings.TrimSuffix(s, "\n")
}
