package tofu

import (
	"strings"
	"testing"
)

func TestEncryptionConfigRefusesShortPassphrase(t *testing.T) {
	if _, err := EncryptionConfig("too-short", false); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("err = %v, want a message naming the 16-character minimum", err)
	}
	cfg, err := EncryptionConfig("a-long-enough-passphrase", true)
	if err != nil || !strings.Contains(cfg, "fallback") || strings.Contains(cfg, "enforced") {
		t.Fatalf("migrate config: %v\n%s", err, cfg)
	}
}
