package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strings"

	"filippo.io/age"
)

// List returns the tenant's complete backups (manifest present and
// readable), oldest first. Needs k.CanDecrypt(). Objects of IDs without a
// manifest are not listed. A manifest that does not decrypt, or that is
// another tenant's or another backup's, is an error that names it.
func List(ctx context.Context, st Store, k *Keys, tenant string) ([]Manifest, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	if !k.CanDecrypt() {
		return nil, fmt.Errorf("list backups of %s: %w", tenant, errNoIdentity)
	}
	keys, err := st.List(ctx, tenant+"/")
	if err != nil {
		return nil, fmt.Errorf("list backups of %s: %w", tenant, err)
	}
	var ms []Manifest
	for _, key := range keys {
		id, obj, ok := splitKey(tenant, key)
		if !ok || obj != manifestObject {
			continue
		}
		m, err := readManifest(ctx, st, k, tenant, id)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	// IDs name the second; backups of one second sort by their time.
	slices.SortStableFunc(ms, func(a, b Manifest) int { return a.Time.Compare(b.Time) })
	return ms, nil
}

// splitKey splits TENANT/ID/OBJECT into ID and OBJECT, for valid IDs only.
func splitKey(tenant, key string) (id, obj string, ok bool) {
	rest, ok := strings.CutPrefix(key, tenant+"/")
	if !ok {
		return "", "", false
	}
	id, obj, ok = strings.Cut(rest, "/")
	return id, obj, ok && idPattern.MatchString(id) && !strings.Contains(obj, "/")
}

// maxManifest bounds what a manifest's decryption may hold.
const maxManifest = 1 << 20

// readManifest reads, decrypts and checks one manifest: it must name this
// tenant and this ID.
func readManifest(ctx context.Context, st Store, k *Keys, tenant, id string) (Manifest, error) {
	rc, err := st.Get(ctx, objectKey(tenant, id, manifestObject))
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return Manifest{}, fmt.Errorf("backup %s of tenant %s: %w", id, tenant, ErrNotFound)
		}
		return Manifest{}, fmt.Errorf("backup %s: %w", id, err)
	}
	defer rc.Close()
	src := &recorder{r: rc}
	b, err := readDecrypted(k, src, maxManifest+1)
	if err != nil {
		if src.err != nil {
			return Manifest{}, fmt.Errorf("backup %s: reading manifest: %w", id, src.err)
		}
		return Manifest{}, decryptError(id, "manifest", err)
	}
	var m Manifest
	if len(b) > maxManifest {
		return Manifest{}, fmt.Errorf("backup %s: manifest is over %d bytes", id, maxManifest)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("backup %s: manifest: %w", id, err)
	}
	if m.Tenant != tenant {
		return Manifest{}, fmt.Errorf("backup %s belongs to tenant %s, not %s", id, m.Tenant, tenant)
	}
	if m.ID != id {
		return Manifest{}, fmt.Errorf("backup %s: its manifest is backup %s's", id, m.ID)
	}
	return m, nil
}

func readDecrypted(k *Keys, src io.Reader, limit int64) ([]byte, error) {
	r, err := k.decrypt(src)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(r, limit))
}

// decryptError tells a backup the server holds no key for from one whose
// bytes were changed.
func decryptError(id, part string, err error) error {
	var noMatch *age.NoIdentityMatchError
	if errors.As(err, &noMatch) || errors.Is(err, errNoIdentity) {
		return fmt.Errorf("backup %s: %s does not decrypt with this server's keys: %w", id, part, err)
	}
	return fmt.Errorf("backup %s: %s is damaged or altered (it does not decrypt): %w", id, part, err)
}

// Backup is one backup opened for a restore; its manifest is read and
// checked.
type Backup struct {
	Manifest Manifest

	st Store
	k  *Keys
}

// Open reads and checks a backup for a restore: the manifest decrypts,
// belongs to tenant (else "backup ID belongs to tenant OTHER, not TENANT"),
// and Verify streams the snapshot and state through decryption and SHA-256
// and compares with the manifest.
func Open(ctx context.Context, st Store, k *Keys, tenant, id string) (*Backup, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("backup %q: not a backup ID (want 20261205T083000Z-0123abcd)", id)
	}
	if !k.CanDecrypt() {
		return nil, fmt.Errorf("backup %s: %w", id, errNoIdentity)
	}
	m, err := readManifest(ctx, st, k, tenant, id)
	if err != nil {
		return nil, err
	}
	b := &Backup{Manifest: m, st: st, k: k}
	if err := b.Verify(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// Verify streams the snapshot and the state through decryption and SHA-256
// and compares them with the manifest.
func (b *Backup) Verify(ctx context.Context) error {
	for _, part := range []string{PartSnapshot, PartState} {
		r, err := b.open(ctx, part)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, r)
		if cerr := r.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// State returns the decrypted state, its hash checked.
func (b *Backup) State(ctx context.Context) ([]byte, error) {
	r, err := b.open(ctx, PartState)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(r)
	if cerr := r.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return data, nil
}

// Snapshot returns the decrypted snapshot stream; its Read at the end, and
// its Close after that, report a snapshot that does not match the manifest
// as an error.
func (b *Backup) Snapshot(ctx context.Context) (io.ReadCloser, error) {
	return b.open(ctx, PartSnapshot)
}

func (b *Backup) open(ctx context.Context, part string) (io.ReadCloser, error) {
	id := b.Manifest.ID
	want, ok := b.Manifest.Parts[part]
	if !ok {
		return nil, fmt.Errorf("backup %s: its manifest names no %s", id, part)
	}
	rc, err := b.st.Get(ctx, objectKey(b.Manifest.Tenant, id, partObject(part)))
	if err != nil {
		return nil, fmt.Errorf("backup %s: %s: %w", id, part, err)
	}
	src := &recorder{r: rc}
	c := &checked{src: src, c: rc, h: sha256.New(), want: want, id: id, part: part}
	c.r, err = b.k.decrypt(src)
	if err != nil {
		rc.Close()
		return nil, c.fail(err)
	}
	return c, nil
}

// recorder keeps the error of the store's reader, so that a failed read is
// not mistaken for a damaged object.
type recorder struct {
	r   io.Reader
	err error
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// checked reads a decrypted part and checks it against the manifest: at
// the end its hash and size, all along its size.
type checked struct {
	r    io.Reader // decrypted
	src  *recorder // encrypted, from the store
	c    io.Closer
	h    hash.Hash
	n    int64
	want Part
	id   string
	part string
	err  error // sticky: a mismatch or a damaged object
}

func (c *checked) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	switch {
	case c.n > c.want.Size:
		c.err = c.mismatch(fmt.Sprintf("more than the %d bytes it names", c.want.Size))
	case err == io.EOF:
		if got := hex.EncodeToString(c.h.Sum(nil)); got != c.want.SHA256 || c.n != c.want.Size {
			c.err = c.mismatch(fmt.Sprintf("sha256 %s (%d bytes) want %s (%d bytes)", got, c.n, c.want.SHA256, c.want.Size))
		}
	case err != nil:
		c.err = c.fail(err)
	}
	if c.err != nil {
		return n, c.err
	}
	return n, err
}

// fail names a read error of the store as such, and any other as a part
// that does not decrypt.
func (c *checked) fail(err error) error {
	if c.src.err != nil {
		return fmt.Errorf("backup %s: reading %s: %w", c.id, c.part, c.src.err)
	}
	return decryptError(c.id, c.part, err)
}

func (c *checked) mismatch(what string) error {
	return fmt.Errorf("backup %s: %s does not match its manifest: %s", c.id, c.part, what)
}

func (c *checked) Close() error {
	err := c.c.Close()
	if c.err != nil {
		return c.err
	}
	return err
}
