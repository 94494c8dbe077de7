package sources

import (
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// TestSSHSigRefusesSHA1: an RSA signature made with ssh-rsa (SHA-1) is
// refused even though the key and the signature match, as OpenSSH refuses
// it; the same key's rsa-sha2-512 signature verifies.
func TestSSHSigRefusesSHA1(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	as := signer.(ssh.AlgorithmSigner)
	msg := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nA commit\n")
	for _, tc := range []struct {
		alg     string
		refused bool
	}{{ssh.KeyAlgoRSA, true}, {ssh.KeyAlgoRSASHA512, false}} {
		s := &sshSig{pub: signer.PublicKey(), namespace: "git", hashAlg: "sha512"}
		s.sig, err = as.SignWithAlgorithm(rand.Reader, s.signedData(msg), tc.alg)
		if err != nil {
			t.Fatal(err)
		}
		err := s.verify(msg)
		if tc.refused && (err == nil || !strings.Contains(err.Error(), "SHA-1")) {
			t.Errorf("%s signature: %v, want refused for SHA-1", tc.alg, err)
		}
		if !tc.refused && err != nil {
			t.Errorf("%s signature: %v, want verified", tc.alg, err)
		}
	}
}
