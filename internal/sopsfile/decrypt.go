package sopsfile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	sops "github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keyservice"
	"github.com/getsops/sops/v3/stores"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
	"google.golang.org/grpc"
)

// Decrypt returns the plain YAML of file, whose content data the sops CLI
// encrypted (YAML, age recipients, any of encrypted_regex,
// encrypted_suffix, unencrypted_regex, unencrypted_suffix and the comment
// rules, one document or several), and the JSON pointers of the values it
// decrypted. It decrypts as sops does, and verifies the file's MAC.
//
// Each pointer starts with the index of its document in the file, and
// goes on as a JSON pointer into that document (RFC 6901, as
// schema.NewSource takes): "/0/spec/patch" is spec.patch of the first
// document, "/1/spec/configPatches/0/patch" a value of the second. They
// come in the order of the file.
//
// The plain YAML holds the same documents, keys and list items in the
// same order as data, with sops's layout; its lines are not those of data.
// An error names file, wraps ErrNoIdentity, ErrMACMismatch or ErrMetadata
// when it is one of those, and never holds a decrypted value.
func (id *Identities) Decrypt(file string, data []byte) (plain []byte, encrypted []string, err error) {
	store := sopsyaml.NewStore(&config.YAMLStoreConfig{})
	branches, err := store.LoadPlainFile(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: not a YAML file sops can read: %w", file, err)
	}
	branches, metadata, err := stores.ExtractMetadata(branches, stores.MetadataOpts{Flatten: stores.MetadataFlattenNone})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w: %v", file, ErrMetadata, err)
	}
	if err := checkMetadata(metadata); err != nil {
		return nil, nil, fmt.Errorf("%s: %w: %v", file, ErrMetadata, err)
	}
	tree := sops.Tree{Branches: branches, Metadata: metadata, FilePath: file}
	ks := &ageKeyService{ids: id.ids}
	key, err := tree.Metadata.GetDataKeyWithKeyServices([]keyservice.KeyServiceClient{ks}, sops.DefaultDecryptionOrder)
	if err != nil {
		if ks.tampered {
			return nil, nil, fmt.Errorf("%s: %w (the data key of an age recipient does not decrypt)", file, ErrMACMismatch)
		}
		return nil, nil, fmt.Errorf("%s: %w (recipients: %s)", file, ErrNoIdentity, recipients(metadata))
	}
	before := make(sops.TreeBranches, len(tree.Branches))
	for i, b := range tree.Branches {
		before[i] = clone(b).(sops.TreeBranch)
	}
	cipher := aes.NewCipher()
	mac, err := tree.Decrypt(key, cipher)
	if err != nil {
		// The walk fails on a value that does not authenticate, or that
		// the file's rules encrypt but is not encrypted; its error quotes
		// the value, and is left out.
		return nil, nil, fmt.Errorf("%s: %w (a value that the file's rules encrypt does not decrypt)", file, ErrMACMismatch)
	}
	stored, err := cipher.Decrypt(tree.Metadata.MessageAuthenticationCode, key, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w (the mac does not authenticate)", file, ErrMACMismatch)
	}
	if stored != mac {
		return nil, nil, fmt.Errorf("%s: %w (the values do not match the mac)", file, ErrMACMismatch)
	}
	plain, err = store.EmitPlainFile(tree.Branches)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: cannot write the decrypted YAML", file)
	}
	return plain, decrypted(before, tree.Branches), nil
}

// checkMetadata rejects metadata that sops reads without complaint but
// that cannot decrypt a file.
func checkMetadata(m sops.Metadata) error {
	switch {
	case m.MessageAuthenticationCode == "":
		return errors.New("no mac")
	case m.LastModified.IsZero():
		return errors.New("no lastmodified")
	case m.MasterKeyCount() == 0:
		return errors.New("no recipient")
	}
	return nil
}

// ageKeyService decrypts a file's data key with age identities, as the
// sops CLI's local key service does with those of SOPS_AGE_KEY_FILE; it
// reads no environment, file or command of its own, and refuses the keys
// of other types.
type ageKeyService struct {
	ids sopsage.ParsedIdentities
	// tampered records an age data key that a held identity matched but
	// that did not decrypt.
	tampered bool
}

func (s *ageKeyService) Decrypt(_ context.Context, in *keyservice.DecryptRequest, _ ...grpc.CallOption) (*keyservice.DecryptResponse, error) {
	k := in.GetKey().GetAgeKey()
	if k == nil {
		return nil, errors.New("only age keys are used")
	}
	mk := &sopsage.MasterKey{Recipient: k.GetRecipient(), EncryptedKey: string(in.GetCiphertext())}
	s.ids.ApplyToMasterKey(mk)
	plain, err := mk.Decrypt()
	if err != nil {
		var none *age.NoIdentityMatchError
		if !errors.As(err, &none) {
			s.tampered = true
		}
		return nil, err
	}
	return &keyservice.DecryptResponse{Plaintext: plain}, nil
}

func (s *ageKeyService) Encrypt(context.Context, *keyservice.EncryptRequest, ...grpc.CallOption) (*keyservice.EncryptResponse, error) {
	return nil, errors.New("encrypting through the age key service of sopsfile")
}

// encPrefix starts every value the sops AES cipher encrypted.
const encPrefix = "ENC[AES256_GCM,"

// decrypted returns, in the order of the file, the pointers (document
// index first) of the leaves that were ciphertexts in before, a copy of
// the tree as it was read, and are no longer in after, the tree sops
// decrypted: the values sops decrypted. A ciphertext that the file's rules
// leave alone stays as it was. The two trees have the same shape; an item
// of a list that decrypts to a comment (sops writes a comment in a list as
// an encrypted item) takes no index, as in the plain YAML.
func decrypted(before, after sops.TreeBranches) []string {
	var out []string
	for i := range after {
		walkPair(before[i], after[i], "/"+strconv.Itoa(i), func(ptr string, b, a any) {
			if s, ok := b.(string); ok && strings.HasPrefix(s, encPrefix) && a != b {
				out = append(out, ptr)
			}
		})
	}
	return out
}

// walkPair calls f with the JSON pointer and the two values of each leaf
// of the trees b and a, whose pointer is ptr, in order. Comments, which
// sops keeps as keys of mappings and items of lists, are not leaves and
// take no list index.
func walkPair(b, a any, ptr string, f func(ptr string, b, a any)) {
	switch x := a.(type) {
	case sops.TreeBranch:
		y, _ := b.(sops.TreeBranch)
		for i, item := range x {
			if _, isComment := item.Key.(sops.Comment); isComment || i >= len(y) {
				continue
			}
			walkPair(y[i].Value, item.Value, ptr+"/"+escapeToken(fmt.Sprint(item.Key)), f)
		}
	case []any:
		y, _ := b.([]any)
		n := 0
		for i, item := range x {
			if _, isComment := item.(sops.Comment); isComment || i >= len(y) {
				continue
			}
			walkPair(y[i], item, ptr+"/"+strconv.Itoa(n), f)
			n++
		}
	case sops.Comment:
	default:
		f(ptr, b, a)
	}
}

// clone copies the mappings and lists of a tree, which sops decrypts in
// place.
func clone(v any) any {
	switch x := v.(type) {
	case sops.TreeBranch:
		out := make(sops.TreeBranch, len(x))
		for i, item := range x {
			out[i] = sops.TreeItem{Key: item.Key, Value: clone(item.Value)}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			out[i] = clone(item)
		}
		return out
	}
	return v
}

// escapeToken escapes a key for a JSON pointer (RFC 6901).
func escapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
