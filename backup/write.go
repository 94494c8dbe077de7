package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
)

// Manifest is what a backup's manifest.age holds, as JSON, and what List
// returns.
type Manifest = schema.BackupInfo

// Part is one decrypted part of a backup, in Manifest.Parts under
// PartSnapshot and PartState.
type Part = schema.BackupPart

// The parts of a backup, and the objects under TENANT/ID/.
const (
	PartSnapshot = "snapshot"
	PartState    = "state"

	manifestObject = "manifest.age"
)

func objectKey(tenant, id, part string) string { return tenant + "/" + id + "/" + part }

func partObject(part string) string { return part + ".age" }

// idTime is the layout of a backup ID's time: IDs sort by it.
const idTime = "20060102T150405Z"

var idPattern = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$`)

// newID is t in UTC, "-", and 8 random hex digits.
func newID(t time.Time) string {
	var b [4]byte
	rand.Read(b[:])
	return t.UTC().Format(idTime) + "-" + hex.EncodeToString(b[:])
}

// idAge parses the time an ID starts with.
func idAge(id string, at time.Time) (time.Duration, bool) {
	if !idPattern.MatchString(id) {
		return 0, false
	}
	t, err := time.Parse(idTime, id[:len(idTime)])
	if err != nil {
		return 0, false
	}
	return at.Sub(t), true
}

func checkTenant(tenant string) error {
	if checkKey(tenant) != nil || strings.Contains(tenant, "/") {
		return fmt.Errorf("backup: %q is not a tenant name", tenant)
	}
	return nil
}

// Write streams snapshot (of any size, bounded memory) through SHA-256 and
// age into the store, then state, then the manifest. m carries what the
// caller knows (Tenant, Time, Machine, Etcd, versions, Commit, Reason);
// Write fills ID, Parts, SizeBytes (and Time, when zero). On any error it
// deletes what it wrote and returns the error; nothing partial is listed.
// When ctx ends, Write returns at once even if snapshot's Read blocks.
func Write(ctx context.Context, st Store, k *Keys, m Manifest, snapshot io.Reader, state []byte) (_ Manifest, err error) {
	if err := checkTenant(m.Tenant); err != nil {
		return Manifest{}, err
	}
	if k == nil || len(k.recipients) == 0 {
		return Manifest{}, errors.New("backup: no keys to encrypt with: backups are never stored in plain text")
	}
	if m.Time.IsZero() {
		m.Time = time.Now()
	}
	m.Time = m.Time.UTC()
	m.ID = newID(m.Time)
	defer func() {
		if err != nil {
			deleteBackup(ctx, st, m.Tenant, m.ID)
			err = fmt.Errorf("backup %s of %s to %s: %w", m.ID, m.Tenant, st, err)
		}
	}()
	m.Parts = map[string]Part{}
	m.SizeBytes = 0
	for _, p := range []struct {
		name string
		r    io.Reader
	}{{PartSnapshot, snapshot}, {PartState, bytes.NewReader(state)}} {
		part, stored, err := putEncrypted(ctx, st, k, objectKey(m.Tenant, m.ID, partObject(p.name)), p.r)
		if err != nil {
			return Manifest{}, fmt.Errorf("%s: %w", p.name, err)
		}
		m.Parts[p.name] = part
		m.SizeBytes += stored
	}
	enc, err := sealManifest(k, &m)
	if err != nil {
		return Manifest{}, err
	}
	if err := st.Put(ctx, objectKey(m.Tenant, m.ID, manifestObject), bytes.NewReader(enc)); err != nil {
		return Manifest{}, fmt.Errorf("manifest: %w", err)
	}
	return m, nil
}

// putEncrypted streams src through SHA-256 and age into key: a goroutine
// encrypts into a pipe that st.Put reads. It returns the plain part's hash
// and size and the stored size. An error on either side ends both; the
// end of ctx ends both, even when src blocks.
func putEncrypted(ctx context.Context, st Store, k *Keys, key string, src io.Reader) (Part, int64, error) {
	p := newPipe()
	stop := context.AfterFunc(ctx, func() { p.Abort(ctx.Err()) })
	defer stop()
	plain := &counter{r: src, h: sha256.New()}
	encErr := make(chan error, 1)
	go func() {
		err := encryptTo(p, k, plain)
		p.CloseWrite(err)
		encErr <- err
	}()
	stored := &counter{r: p}
	err := st.Put(ctx, key, stored)
	p.Abort(errors.Join(err, errPutEnded)) // ends a blocked encryption
	if err != nil {
		return Part{}, 0, err
	}
	select {
	case err = <-encErr: // Put read to EOF: encryption has finished
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return Part{}, 0, err
	}
	return Part{SHA256: hex.EncodeToString(plain.h.Sum(nil)), Size: plain.n}, stored.n, nil
}

var errPutEnded = errors.New("the store stopped reading")

func encryptTo(w io.Writer, k *Keys, r io.Reader) error {
	enc, err := k.encrypt(w)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(enc, r, make([]byte, 64<<10)); err != nil {
		return err
	}
	return enc.Close()
}

// counter counts (and hashes, with h) what is read through it.
type counter struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.h != nil {
		c.h.Write(p[:n])
	}
	return n, err
}

// sealManifest encrypts m as JSON, with SizeBytes counting the encrypted
// manifest itself: age's output size depends only on the input's, so a few
// rounds find the fixed point.
func sealManifest(k *Keys, m *Manifest) ([]byte, error) {
	data := m.SizeBytes
	var enc []byte
	for size, round := int64(0), 0; ; round++ {
		if round == 8 {
			return nil, errors.New("manifest: its encrypted size does not settle")
		}
		m.SizeBytes = data + size
		plain, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		var buf bytes.Buffer
		if err := encryptTo(&buf, k, bytes.NewReader(plain)); err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		enc = buf.Bytes()
		if int64(len(enc)) == size {
			return enc, nil
		}
		size = int64(len(enc))
	}
}

// deleteBackup deletes every object of a backup, the manifest first, so
// that it stops being listed before its parts go. It runs after ctx may
// have ended, and reports nothing: a leftover is pruned later.
func deleteBackup(ctx context.Context, st Store, tenant, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	prefix := tenant + "/" + id + "/"
	var errs []error
	errs = append(errs, st.Delete(ctx, prefix+manifestObject))
	keys, err := st.List(ctx, prefix)
	errs = append(errs, err)
	for _, key := range keys {
		errs = append(errs, st.Delete(ctx, key))
	}
	return errors.Join(errs...)
}
