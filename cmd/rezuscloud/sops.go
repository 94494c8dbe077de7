package main

import (
	"crypto/sha256"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/rezuscloud/rezuscloud/internal/sopsfile"
	"github.com/rezuscloud/rezuscloud/schema"
)

func addSOPSFlag(fs *pflag.FlagSet, f *serveFlags) {
	fs.StringVar(&f.sopsAgeKeyFile, "sops-age-key-file", "", "age key `FILE` (as sops reads SOPS_AGE_KEY_FILE: one or more AGE-SECRET-KEY-1… lines) that SOPS-encrypted manifests are decrypted with; the decrypted values stay in memory and show as "+schema.EncryptedValue+" everywhere else. Without it a commit with an encrypted file is refused")
}

// sopsKeys opens the age identities of --sops-age-key-file, and derives
// from the file the key of the input hashes of tenants with encrypted
// values (reconciler.Options.HashKey). No file: nil, nil. A file that is
// missing, unreadable or holds no identity is an error.
func sopsKeys(path string) (schema.Decrypter, []byte, error) {
	if path == "" {
		return nil, nil, nil
	}
	ids, err := sopsfile.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--sops-age-key-file: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--sops-age-key-file: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "rezuscloud input hash key\x00")
	h.Write(b)
	return ids, h.Sum(nil), nil
}

// openSOPS gives the reconciler the identities of --sops-age-key-file. A
// decrypted value reaches the machines' configs, which the tenants' TF
// state holds: only encrypted state keeps it from resting in clear, so the
// key file needs state encryption.
func (p *reconcilerPart) openSOPS() (err error) {
	if p.decrypt, p.hashKey, err = sopsKeys(p.f.sopsAgeKeyFile); err != nil || p.decrypt == nil {
		return err
	}
	if !p.encrypt {
		return fmt.Errorf("--sops-age-key-file needs state encryption: values decrypted from SOPS files reach the machine configs that the tenants' TF state holds, and without encryption they would rest there in clear; set %s", envStatePassphrase)
	}
	p.log.Info("SOPS-encrypted manifests are decrypted with the age identities of a key file", "file", p.f.sopsAgeKeyFile)
	return nil
}
