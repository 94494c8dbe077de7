package sopsfile

import (
	"errors"
	"fmt"
	"time"

	sops "github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keyservice"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
	"github.com/getsops/sops/v3/version"
)

// Encrypt encrypts the YAML plain for the age recipients (age1…), as
// `sops encrypt --age RECIPIENTS [--encrypted-regex REGEX]` does, through
// the SOPS packages' own encrypt path: the same store, metadata, data key,
// cipher and MAC. With encryptedRegex "" every value is encrypted but
// those under keys ending in _unencrypted, the CLI's default. Tests and
// tools use it to make the files a repository commits; the server never
// encrypts.
func Encrypt(plain []byte, recipients []string, encryptedRegex string) ([]byte, error) {
	md := sops.Metadata{EncryptedRegex: encryptedRegex}
	if encryptedRegex == "" {
		md.UnencryptedSuffix = sops.DefaultUnencryptedSuffix
	}
	return encrypt(plain, recipients, md)
}

// encrypt is Encrypt with the rules of md (one of its suffixes and
// regular expressions).
func encrypt(plain []byte, recipients []string, md sops.Metadata) ([]byte, error) {
	store := sopsyaml.NewStore(&config.YAMLStoreConfig{})
	branches, err := store.LoadPlainFile(plain)
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	if len(branches) == 0 {
		return nil, errors.New("encrypt: the YAML holds no document")
	}
	if store.HasSopsTopLevelKey(branches[0]) {
		return nil, errors.New("encrypt: the YAML is already encrypted (it has a top-level sops key)")
	}
	if len(recipients) == 0 {
		return nil, errors.New("encrypt: no age recipient")
	}
	var group sops.KeyGroup
	for _, r := range recipients {
		k, err := sopsage.MasterKeyFromRecipient(r)
		if err != nil {
			return nil, fmt.Errorf("encrypt: %w", err)
		}
		group = append(group, k)
	}
	md.KeyGroups, md.Version = []sops.KeyGroup{group}, version.Version
	tree := sops.Tree{Branches: branches, Metadata: md}
	key, errs := tree.GenerateDataKeyWithKeyServices([]keyservice.KeyServiceClient{keyservice.NewLocalClient()})
	if len(errs) > 0 {
		return nil, fmt.Errorf("encrypt: data key: %w", errors.Join(errs...))
	}
	// As the CLI's common.EncryptTree: encrypt, then the MAC under the
	// time of the change.
	cipher := aes.NewCipher()
	mac, err := tree.Encrypt(key, cipher)
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	tree.Metadata.LastModified = time.Now().UTC()
	tree.Metadata.MessageAuthenticationCode, err = cipher.Encrypt(mac, key, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil {
		return nil, fmt.Errorf("encrypt: mac: %w", err)
	}
	return store.EmitEncryptedFile(tree)
}
