package main

import (
	"errors"

	"github.com/rezuscloud/rezuscloud/sources"
)

// signatureVerifier returns the Verifier of --verify-signatures, with the
// keys of --allowed-signers and --gpg-keyring; nil without the flag.
func signatureVerifier(f *serveFlags) (*sources.Verifier, error) {
	if !f.verifySignatures {
		if f.allowedSigners != "" || f.gpgKeyring != "" {
			return nil, errors.New("--allowed-signers and --gpg-keyring need --verify-signatures")
		}
		if f.allowNonFastForward {
			return nil, errors.New("--allow-non-fast-forward needs --verify-signatures: without it every commit is applied, force-pushed or not")
		}
		return nil, nil
	}
	if f.repo == "" {
		return nil, errors.New("--verify-signatures needs --repo: a directory has no signed commits")
	}
	if f.allowedSigners == "" && f.gpgKeyring == "" {
		return nil, errors.New("--verify-signatures needs --allowed-signers FILE (SSH keys) or --gpg-keyring FILE (armored GPG keys), or both")
	}
	return sources.NewVerifier(f.allowedSigners, f.gpgKeyring)
}
