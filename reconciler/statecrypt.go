package reconciler

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strings"
)

// decryptState returns the plain state file of a state that OpenTofu
// encrypted with the key providers and methods tofu.EncryptionConfig
// configures: a pbkdf2 key from passphrase, with the salt, iterations,
// hash and key length that the stored file's metadata records, and
// AES-GCM with the nonce ahead of the ciphertext. It reads the state as
// tofu itself would, without running it; the result stays in memory.
func decryptState(raw []byte, passphrase string) ([]byte, error) {
	var st struct {
		Meta    map[string][]byte `json:"meta"`
		Data    []byte            `json:"encrypted_data"`
		Version string            `json:"encryption_version"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("encrypted state: %w", err)
	}
	if st.Version != "v0" || len(st.Data) == 0 {
		return nil, fmt.Errorf("encrypted state: version %q, %d bytes of data: not a state this build reads", st.Version, len(st.Data))
	}
	var errs []error
	for name, meta := range st.Meta {
		if !strings.HasPrefix(name, "key_provider.pbkdf2.") {
			continue
		}
		plain, err := decryptPBKDF2(meta, st.Data, passphrase)
		if err == nil {
			return plain, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	if len(errs) == 0 {
		return nil, errors.New("encrypted state: no pbkdf2 key metadata")
	}
	return nil, fmt.Errorf("encrypted state: %w", errors.Join(errs...))
}

// decryptPBKDF2 derives the key that meta describes and opens data.
func decryptPBKDF2(meta, data []byte, passphrase string) ([]byte, error) {
	var m struct {
		Salt         []byte `json:"salt"`
		Iterations   int    `json:"iterations"`
		HashFunction string `json:"hash_function"`
		KeyLength    int    `json:"key_length"`
	}
	if err := json.Unmarshal(meta, &m); err != nil {
		return nil, fmt.Errorf("key metadata: %w", err)
	}
	var h func() hash.Hash
	switch m.HashFunction {
	case "sha256":
		h = sha256.New
	case "sha512":
		h = sha512.New
	default:
		return nil, fmt.Errorf("key metadata: hash function %q", m.HashFunction)
	}
	if len(m.Salt) == 0 || m.Iterations <= 0 || m.KeyLength <= 0 {
		return nil, errors.New("key metadata: no salt, iterations or key length")
	}
	key, err := pbkdf2.Key(h, passphrase, m.Salt, m.Iterations, m.KeyLength)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if len(data) < gcm.NonceSize() {
		return nil, errors.New("the encrypted data is too short")
	}
	plain, err := gcm.Open(nil, data[:gcm.NonceSize()], data[gcm.NonceSize():], nil)
	if err != nil {
		return nil, fmt.Errorf("decrypt (a wrong passphrase?): %w", err)
	}
	return plain, nil
}
