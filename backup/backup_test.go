package backup_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/minio/minio-go/v7"
	"golang.org/x/crypto/ssh"

	"github.com/rezuscloud/rezuscloud/backup"
	"github.com/rezuscloud/rezuscloud/schema"
)

// passphraseKeys derives the keys of one passphrase once per test binary:
// the derivation is slow on purpose.
var passphraseKeys = sync.OnceValues(func() (*backup.Keys, error) {
	return backup.KeysFromPassphrase("correct horse battery staple")
})

// ageKeys makes an age X25519 key pair: the recipient, and keys that read
// backups back through an identity file.
func ageKeys(t testing.TB) *backup.Keys {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "identity.txt")
	if err := os.WriteFile(file, []byte("# a backup key\n"+id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := backup.KeysFromRecipients([]string{id.Recipient().String()}, []string{file})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sshKeys makes an ssh-ed25519 key pair: its public key as the recipient,
// its OpenSSH private key file as the identity.
func sshKeys(t testing.TB) *backup.Keys {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "backup key")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	recipient := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub))) + " ops@example"
	k, err := backup.KeysFromRecipients([]string{recipient}, []string{file})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// eachKeys runs f with each kind of keys: age recipients with an identity
// file, an ssh-ed25519 recipient with its private key, and the key derived
// from a passphrase.
func eachKeys(t *testing.T, f func(t *testing.T, k *backup.Keys)) {
	t.Run("age", func(t *testing.T) { f(t, ageKeys(t)) })
	t.Run("ssh", func(t *testing.T) { f(t, sshKeys(t)) })
	t.Run("passphrase", func(t *testing.T) {
		k, err := passphraseKeys()
		if err != nil {
			t.Fatal(err)
		}
		f(t, k)
	})
}

// The markers that the tests' snapshots and states hold: no object of the
// store may hold them.
const (
	snapshotMarker = "etcd-snapshot-marker-7f3a9c51e2"
	stateMarker    = "tfstate-private-key-marker-4b8d0e6a13"
)

// snapshotOf is a snapshot of n bytes (over 64 KiB: several age chunks)
// that holds snapshotMarker at its start, middle and end.
func snapshotOf(n int) []byte {
	b := bytes.Repeat([]byte("etcd key/value data "), n/20+1)[:n]
	for _, at := range []int{0, n / 2, n - len(snapshotMarker)} {
		copy(b[at:], snapshotMarker)
	}
	return b
}

func stateOf(tenant string) []byte {
	return []byte(`{"version":4,"tenant":"` + tenant + `","secrets":"` + stateMarker + `"}`)
}

func manifest(tenant string, at time.Time) backup.Manifest {
	return backup.Manifest{
		Tenant: tenant, Time: at, Machine: "cp-1",
		Etcd:         schema.BackupEtcd{RaftIndex: 4242, DBSizeBytes: 1 << 20},
		TalosVersion: "v1.14.1", KubernetesVersion: "v1.37.2", Commit: "0123abcd", Reason: "schedule",
	}
}

func write(t testing.TB, st backup.Store, k *backup.Keys, tenant string, at time.Time, snap []byte) backup.Manifest {
	t.Helper()
	m, err := backup.Write(t.Context(), st, k, manifest(tenant, at), bytes.NewReader(snap), stateOf(tenant))
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	return m
}

func TestWriteListOpen(t *testing.T) {
	eachStore(t, func(t *testing.T, st testStore) {
		eachKeys(t, func(t *testing.T, k *backup.Keys) {
			ctx := t.Context()
			tenant := path.Base(t.Name()) // the key kind: one tenant's backups all decrypt with its keys
			at := time.Date(2026, 12, 5, 8, 30, 0, 0, time.UTC)
			snap := snapshotOf(300 << 10)
			m := write(t, st, k, tenant, at, snap)
			if !strings.HasPrefix(m.ID, "20261205T083000Z-") || len(m.ID) != len("20261205T083000Z-0123abcd") {
				t.Errorf("ID %q, want 20261205T083000Z-XXXXXXXX", m.ID)
			}
			if m.Parts["snapshot"].Size != int64(len(snap)) || m.Parts["state"].Size != int64(len(stateOf(tenant))) {
				t.Errorf("parts %+v, want the plain sizes", m.Parts)
			}
			var stored int64
			for _, key := range list(t, st, tenant+"/"+m.ID+"/") {
				stored += int64(len(get(t, st, key)))
			}
			if m.SizeBytes != stored {
				t.Errorf("SizeBytes %d, want %d: the sum of the stored objects", m.SizeBytes, stored)
			}

			ms, err := backup.List(ctx, st, k, tenant)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != 1 || ms[0].Tenant != tenant || !ms[0].Time.Equal(at) || ms[0].ID != m.ID || ms[0].Etcd.RaftIndex != 4242 || ms[0].Commit != "0123abcd" || ms[0].SizeBytes != m.SizeBytes {
				t.Fatalf("List = %+v, want the one written, %+v", ms, m)
			}

			b, err := backup.Open(ctx, st, k, tenant, m.ID)
			if err != nil {
				t.Fatal(err)
			}
			state, err := b.State(ctx)
			if err != nil || !bytes.Equal(state, stateOf(tenant)) {
				t.Errorf("State = %q, %v", state, err)
			}
			rc, err := b.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			if err != nil || !bytes.Equal(got, snap) {
				t.Errorf("Snapshot: %d bytes, %v; want the %d written", len(got), err, len(snap))
			}
			if err := rc.Close(); err != nil {
				t.Error(err)
			}
		})
	})
}

// Nothing plain rests in the store: no object and no file holds a marker
// of the snapshot or of the state, and the file store's files are 0600 in
// 0700 directories.
func TestNoPlainTextAtRest(t *testing.T) {
	eachStore(t, func(t *testing.T, st testStore) {
		k := ageKeys(t)
		write(t, st, k, "prod", time.Now(), snapshotOf(200<<10))
		write(t, st, k, "prod", time.Now(), snapshotOf(100))
		var n int
		filepath.WalkDir(st.dir, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			info, _ := d.Info()
			if st.s3 == nil {
				if want := os.FileMode(0o600); !d.IsDir() && info.Mode().Perm() != want {
					t.Errorf("%s has mode %04o, want %04o", p, info.Mode().Perm(), want)
				}
				if want := os.FileMode(0o700); d.IsDir() && info.Mode().Perm() != want {
					t.Errorf("directory %s has mode %04o, want %04o", p, info.Mode().Perm(), want)
				}
			}
			if d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			n++
			for _, marker := range []string{snapshotMarker, stateMarker, "etcd key/value data"} {
				if bytes.Contains(b, []byte(marker)) {
					t.Errorf("%s holds %q in plain text", p, marker)
				}
			}
			return nil
		})
		if n < 6 {
			t.Errorf("looked at %d files under %s, want at least the 6 objects", n, st.dir)
		}
	})
}

// flip changes one byte of a stored object, at its middle.
func flip(t testing.TB, st backup.Store, key string) {
	t.Helper()
	b := []byte(get(t, st, key))
	b[len(b)/2] ^= 0x01
	if err := st.Put(t.Context(), key, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
}

func copyObject(t testing.TB, st backup.Store, from, to string) {
	t.Helper()
	put(t, st, to, get(t, st, from))
}

func wantErr(t testing.TB, what string, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v, want an error with %q", what, err, want)
	}
}

func TestTamperedRefused(t *testing.T) {
	st := fileStore(t)
	k := ageKeys(t)
	for _, obj := range []string{"snapshot.age", "state.age", "manifest.age"} {
		m := write(t, st, k, "prod", time.Now(), snapshotOf(200<<10))
		flip(t, st, "prod/"+m.ID+"/"+obj)
		_, err := backup.Open(t.Context(), st, k, "prod", m.ID)
		part := strings.TrimSuffix(obj, ".age")
		wantErr(t, "open with a byte of "+obj+" flipped", err, "backup "+m.ID+": "+part+" is damaged or altered (it does not decrypt)")
		st.Delete(t.Context(), "prod/"+m.ID+"/manifest.age")
	}

	// Another backup's snapshot, whole and well encrypted, under this one's
	// manifest.
	m1 := write(t, st, k, "prod", time.Now(), snapshotOf(1000))
	m2 := write(t, st, k, "prod", time.Now(), snapshotOf(1001))
	copyObject(t, st, "prod/"+m1.ID+"/snapshot.age", "prod/"+m2.ID+"/snapshot.age")
	b, err := backup.Open(t.Context(), st, k, "prod", m2.ID)
	wantErr(t, "open with another backup's snapshot", err, "backup "+m2.ID+": snapshot does not match its manifest: sha256 ")
	if b != nil {
		t.Error("Open returned a backup with its error")
	}
	// A longer one: refused as soon as it runs past the size named.
	m3 := write(t, st, k, "prod", time.Now(), snapshotOf(200<<10))
	copyObject(t, st, "prod/"+m3.ID+"/snapshot.age", "prod/"+m1.ID+"/snapshot.age")
	_, err = backup.Open(t.Context(), st, k, "prod", m1.ID)
	wantErr(t, "open with a longer snapshot", err, "backup "+m1.ID+": snapshot does not match its manifest: more than the 1000 bytes it names")
}

// A backup of tenant a is not tenant b's, whether b asks for it by ID or
// its objects were copied under b's prefix.
func TestForeignRefused(t *testing.T) {
	st := fileStore(t)
	k := ageKeys(t)
	m := write(t, st, k, "a", time.Now(), snapshotOf(1000))
	_, err := backup.Open(t.Context(), st, k, "b", m.ID)
	if !errors.Is(err, backup.ErrNotFound) {
		t.Errorf("open of a's backup as b: %v, want ErrNotFound", err)
	}
	for _, obj := range []string{"snapshot.age", "state.age", "manifest.age"} {
		copyObject(t, st, "a/"+m.ID+"/"+obj, "b/"+m.ID+"/"+obj)
	}
	_, err = backup.Open(t.Context(), st, k, "b", m.ID)
	wantErr(t, "open of a's backup copied under b", err, "backup "+m.ID+" belongs to tenant a, not b")
	_, err = backup.List(t.Context(), st, k, "b")
	wantErr(t, "list of b with a's backup copied under it", err, "backup "+m.ID+" belongs to tenant a, not b")

	// a's snapshot under b's own backup: its hash is not b's.
	mb := write(t, st, k, "b", time.Now(), snapshotOf(2000))
	copyObject(t, st, "a/"+m.ID+"/snapshot.age", "b/"+mb.ID+"/snapshot.age")
	_, err = backup.Open(t.Context(), st, k, "b", mb.ID)
	wantErr(t, "open of b's backup with a's snapshot", err, "snapshot does not match its manifest")
}

func TestWrongKeysRefused(t *testing.T) {
	st := fileStore(t)
	k := ageKeys(t)
	m := write(t, st, k, "prod", time.Now(), snapshotOf(1000))
	for name, other := range map[string]*backup.Keys{"other age key": ageKeys(t), "ssh key": sshKeys(t)} {
		_, err := backup.Open(t.Context(), st, other, "prod", m.ID)
		wantErr(t, "open with "+name, err, "backup "+m.ID+": manifest does not decrypt with this server's keys")
		_, err = backup.List(t.Context(), st, other, "prod")
		wantErr(t, "list with "+name, err, "manifest does not decrypt with this server's keys")
	}

	id, _ := age.GenerateX25519Identity()
	encryptOnly, err := backup.KeysFromRecipients([]string{id.Recipient().String()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if encryptOnly.CanDecrypt() || !k.CanDecrypt() {
		t.Errorf("CanDecrypt: %v without an identity, %v with one", encryptOnly.CanDecrypt(), k.CanDecrypt())
	}
	write(t, st, encryptOnly, "prod", time.Now(), snapshotOf(100))
	_, err = backup.List(t.Context(), st, encryptOnly, "prod")
	wantErr(t, "list without an identity", err, "this server has no identity to decrypt backups with")
	_, err = backup.Open(t.Context(), st, encryptOnly, "prod", m.ID)
	wantErr(t, "open without an identity", err, "this server has no identity to decrypt backups with")
}

func TestKeysErrors(t *testing.T) {
	_, err := backup.KeysFromRecipients(nil, nil)
	wantErr(t, "no recipients", err, "no age recipient")
	_, err = backup.KeysFromRecipients([]string{"age1notakey"}, nil)
	wantErr(t, "a bad age recipient", err, `backup recipient "age1notakey"`)
	_, err = backup.KeysFromRecipients([]string{"ssh-rsa AAAA"}, nil)
	wantErr(t, "an ssh-rsa recipient", err, "want an age recipient")
	id, _ := age.GenerateX25519Identity()
	bad := filepath.Join(t.TempDir(), "identity")
	os.WriteFile(bad, []byte("AGE-SECRET-KEY-1SECRETSTUFF\n"), 0o600)
	_, err = backup.KeysFromRecipients([]string{id.Recipient().String()}, []string{bad})
	wantErr(t, "a bad identity file", err, "backup identity file "+bad)
	if err != nil && strings.Contains(err.Error(), "SECRETSTUFF") {
		t.Errorf("the error quotes the identity file: %v", err)
	}
	_, err = backup.KeysFromPassphrase("")
	wantErr(t, "an empty passphrase", err, "empty passphrase")
	st := fileStore(t)
	_, err = backup.Write(t.Context(), st, nil, manifest("prod", time.Now()), bytes.NewReader(snapshotOf(100)), nil)
	wantErr(t, "write without keys", err, "never stored in plain text")
	if keys := list(t, st, ""); len(keys) != 0 {
		t.Errorf("a write without keys stored %v", keys)
	}
}

// The same passphrase gives the same key: a server started again reads
// the backups of the one before.
func TestPassphraseKeysStable(t *testing.T) {
	st := fileStore(t)
	k1, err := passphraseKeys()
	if err != nil {
		t.Fatal(err)
	}
	m := write(t, st, k1, "prod", time.Now(), snapshotOf(1000))
	k2, err := backup.KeysFromPassphrase("correct horse battery staple")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Open(t.Context(), st, k2, "prod", m.ID); err != nil {
		t.Errorf("open with the keys of the same passphrase again: %v", err)
	}
}

func TestPrune(t *testing.T) {
	eachStore(t, func(t *testing.T, st testStore) {
		ctx := t.Context()
		k := ageKeys(t)
		now := time.Now().UTC()
		var ids []string
		for i := range 4 {
			ids = append(ids, write(t, st, k, "prod", now.Add(time.Duration(i-10)*time.Minute), snapshotOf(100)).ID)
		}
		other := write(t, st, k, "staging", now.Add(-time.Hour), snapshotOf(100))
		// Leftovers of writes that never finished: one old, one that could
		// be in flight.
		old := now.Add(-2*time.Hour).Format("20060102T150405Z") + "-0badf00d"
		recent := now.Add(-time.Minute).Format("20060102T150405Z") + "-1badf00d"
		put(t, st, "prod/"+old+"/snapshot.age", "partial")
		put(t, st, "prod/"+recent+"/snapshot.age", "in flight")

		deleted, err := backup.Prune(ctx, st, k, "prod", 2)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{old, ids[0], ids[1]}; !slices.Equal(deleted, want) {
			t.Errorf("Prune deleted %v, want %v", deleted, want)
		}
		ms, err := backup.List(ctx, st, k, "prod")
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, m := range ms {
			kept = append(kept, m.ID)
		}
		if !slices.Equal(kept, ids[2:]) {
			t.Errorf("List after Prune = %v, want the newest two %v", kept, ids[2:])
		}
		if got := list(t, st, "prod/"+old+"/"); len(got) != 0 {
			t.Errorf("the old leftover's objects remain: %v", got)
		}
		if got := list(t, st, "prod/"+recent+"/"); len(got) != 1 {
			t.Errorf("the recent leftover's objects = %v, want them kept", got)
		}
		if ms, err := backup.List(ctx, st, k, "staging"); err != nil || len(ms) != 1 || ms[0].ID != other.ID {
			t.Errorf("another tenant's backups after Prune: %v, %v", ms, err)
		}
		if _, err := backup.Prune(ctx, st, k, "prod", 0); err == nil {
			t.Error("Prune with keep 0 succeeded")
		}
	})
}

// hanging reads r, then says so on hung and blocks until released, as a
// snapshot stream from a node that stopped sending.
type hanging struct {
	r       io.Reader
	hung    chan struct{}
	release chan struct{}
}

func (h *hanging) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if err == io.EOF {
		close(h.hung)
		<-h.release
	}
	return n, err
}

// A snapshot stream that hangs is cut when the context ends, and nothing
// of the backup stays in the store.
func TestWriteHangingSnapshot(t *testing.T) {
	eachStore(t, func(t *testing.T, st testStore) {
		k := ageKeys(t)
		put(t, st, "prod/other", "kept")
		h := &hanging{r: bytes.NewReader(snapshotOf(partSize + 1<<20)), hung: make(chan struct{}), release: make(chan struct{})}
		t.Cleanup(func() { close(h.release) })
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, err := backup.Write(ctx, st, k, manifest("prod", time.Now()), h, stateOf("prod"))
			done <- err
		}()
		select {
		case <-h.hung:
			// A write in flight is not a backup yet: its manifest comes last.
			if ms, err := backup.List(t.Context(), st, k, "prod"); err != nil || len(ms) != 0 {
				t.Errorf("List while a write is in flight = %v, %v; want nothing", ms, err)
			}
			cancel()
		case err := <-done:
			t.Fatalf("Write returned before the snapshot hung: %v", err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Write of a hanging snapshot: %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Write of a hanging snapshot did not return 30 s after its context ended")
		}
		if ms, err := backup.List(t.Context(), st, k, "prod"); err != nil || len(ms) != 0 {
			t.Errorf("List after a cut write = %v, %v; want nothing", ms, err)
		}
		if got := list(t, st, ""); !slices.Equal(got, []string{"prod/other"}) {
			t.Errorf("keys after a cut write = %v, want only prod/other", got)
		}
		leftovers(t, st, 1)
	})
}

// failing is a store whose Put of a key with a given suffix fails.
type failing struct {
	backup.Store
	suffix string
}

func (f failing) Put(ctx context.Context, key string, r io.Reader) error {
	if strings.HasSuffix(key, f.suffix) {
		io.Copy(io.Discard, io.LimitReader(r, 1000))
		return fmt.Errorf("the store refuses %s", key)
	}
	return f.Store.Put(ctx, key, r)
}

// A write that fails at any step deletes what it wrote; a snapshot stream
// that breaks passes its error on.
func TestWriteFailureLeavesNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, st testStore) {
		k := ageKeys(t)
		for _, suffix := range []string{"snapshot.age", "state.age", "manifest.age"} {
			_, err := backup.Write(t.Context(), failing{st, suffix}, k, manifest("prod", time.Now()), bytes.NewReader(snapshotOf(200<<10)), stateOf("prod"))
			wantErr(t, "write with the store refusing "+suffix, err, "the store refuses")
		}
		broken := io.MultiReader(bytes.NewReader(snapshotOf(partSize+1<<20)), &errAfter{errors.New("node went away")})
		_, err := backup.Write(t.Context(), st, k, manifest("prod", time.Now()), broken, stateOf("prod"))
		wantErr(t, "write of a broken snapshot", err, "node went away")
		if got := list(t, st, ""); len(got) != 0 {
			t.Errorf("keys after failed writes: %v", got)
		}
		leftovers(t, st, 0)
	})
}

type errAfter struct{ err error }

func (e *errAfter) Read([]byte) (int, error) { return 0, e.err }

func TestDownload(t *testing.T) {
	eachStore(t, func(t *testing.T, st testStore) {
		k := ageKeys(t)
		m := write(t, st, k, "prod", time.Now(), snapshotOf(100<<10))
		var buf bytes.Buffer
		if err := backup.Download(t.Context(), st, "prod", m.ID, &buf); err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(&buf)
		var names []string
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, hdr.Name)
			b, _ := io.ReadAll(tr)
			if want := get(t, st, "prod/"+hdr.Name); string(b) != want {
				t.Errorf("%s: %d bytes in the tar, want the %d stored", hdr.Name, len(b), len(want))
			}
		}
		want := []string{m.ID + "/manifest.age", m.ID + "/snapshot.age", m.ID + "/state.age"}
		if !slices.Equal(names, want) {
			t.Errorf("tar holds %v, want %v", names, want)
		}
		buf.Reset()
		err := backup.Download(t.Context(), st, "staging", m.ID, &buf)
		if !errors.Is(err, backup.ErrNotFound) || buf.Len() != 0 {
			t.Errorf("download of another tenant's ID: %v, %d bytes written; want ErrNotFound and nothing", err, buf.Len())
		}
	})
}

// What a Put cut short by a crash leaves, and List does not show (a
// temporary file, an incomplete multipart upload), goes with the next
// Prune once it is an hour old.
func TestPruneSweeps(t *testing.T) {
	eachStore(t, func(t *testing.T, st testStore) {
		k := ageKeys(t)
		m := write(t, st, k, "prod", time.Now(), snapshotOf(100))
		id := time.Now().UTC().Format("20060102T150405Z") + "-2badf00d"
		if st.s3 == nil {
			dir := filepath.Join(st.dir, "prod", id)
			os.MkdirAll(dir, 0o700)
			if err := os.WriteFile(filepath.Join(dir, ".snapshot.age.tmp123"), []byte("cut short"), 0o600); err != nil {
				t.Fatal(err)
			}
		} else {
			c, err := st.s3.Client()
			if err != nil {
				t.Fatal(err)
			}
			core := minio.Core{Client: c}
			key := "rezuscloud/prod/prod/" + id + "/snapshot.age"
			upload, err := core.NewMultipartUpload(t.Context(), st.s3.Bucket, key, minio.PutObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			part := bytes.Repeat([]byte("cut short"), 1000)
			if _, err := core.PutObjectPart(t.Context(), st.s3.Bucket, key, upload, 1, bytes.NewReader(part), int64(len(part)), minio.PutObjectPartOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := backup.Prune(t.Context(), st.Store, k, "prod", 1); err != nil {
			t.Fatal(err)
		}
		if !leftoversAre(t, st, 3, 1) {
			t.Error("Prune swept a write that may be in flight")
		}
		backup.SetNow(t, 2*time.Hour)
		if _, err := backup.Prune(t.Context(), st.Store, k, "prod", 1); err != nil {
			t.Fatal(err)
		}
		if !leftoversAre(t, st, 3, 0) {
			t.Error("Prune left what a write cut short an hour ago left")
		}
		if ms, err := backup.List(t.Context(), st, k, "prod"); err != nil || len(ms) != 1 || ms[0].ID != m.ID {
			t.Errorf("List after the sweep = %v, %v; want the backup kept", ms, err)
		}
	})
}

// Backups of one second have IDs of that second with random suffixes:
// List orders them by their time, and Prune keeps the newest.
func TestListOrdersBackupsOfOneSecond(t *testing.T) {
	st := fileStore(t)
	k := ageKeys(t)
	at := time.Date(2026, 12, 5, 9, 16, 8, 0, time.UTC)
	var want []string
	for i := range 8 {
		want = append(want, write(t, st, k, "prod", at.Add(time.Duration(i)*time.Millisecond), snapshotOf(100)).ID)
	}
	ms, err := backup.List(t.Context(), st, k, "prod")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("List gave %v, want the order they were written in %v", got, want)
	}
	if _, err := backup.Prune(t.Context(), st, k, "prod", 2); err != nil {
		t.Fatal(err)
	}
	ms, err = backup.List(t.Context(), st, k, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].ID != want[6] || ms[1].ID != want[7] {
		t.Fatalf("after Prune keeping 2: %v, want the newest two %v", ms, want[6:])
	}
}
