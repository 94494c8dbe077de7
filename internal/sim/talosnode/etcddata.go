package talosnode

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// etcdDir is the folder of the sim dir that holds the etcd data of the
// clusters without a Kubernetes API, one file per cluster.
const etcdDir = "etcd"

// etcdData is what a simulated cluster's etcd holds: key/value data that
// tests write (Host.EtcdPut), its revision, and the size of a filler
// that stands for the rest of a large database. The filler's bytes are
// generated, never stored.
type etcdData struct {
	Revision int64             `json:"revision"`
	Filler   int64             `json:"filler,omitempty"`
	KV       map[string][]byte `json:"kv,omitempty"`
}

// size is the length of the data's snapshot.
func (d *etcdData) size() int64 {
	var buf bytes.Buffer
	writeSnapshotHead(&buf, d)
	n := int64(buf.Len()) + d.Filler + sha256.Size
	for k, v := range d.KV {
		n += int64(uvarintLen(len(k)) + len(k) + uvarintLen(len(v)) + len(v))
	}
	return n
}

func uvarintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n))
}

// etcdStore keeps the etcd data of the host's simulated clusters in
// <sim dir>/etcd/<cluster>.json, written atomically at every change. Its
// mutex is taken before the host's, never while the host's is held; a
// cluster's own lock (lock), which orders what changes its etcd as a
// whole (bootstraps, wipes), before both.
type etcdStore struct {
	mu        sync.Mutex
	dir       string
	byCluster map[string]*etcdData   // loaded lazily
	locks     map[string]*sync.Mutex // by cluster, kept for the host's life
}

// lock takes the lock of cluster and returns its release.
func (s *etcdStore) lock(cluster string) func() {
	s.mu.Lock()
	if s.locks == nil {
		s.locks = map[string]*sync.Mutex{}
	}
	l := s.locks[cluster]
	if l == nil {
		l = &sync.Mutex{}
		s.locks[cluster] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (s *etcdStore) path(cluster string) string {
	return filepath.Join(s.dir, clusterKey(cluster)+".json")
}

// clusterKey names a cluster's files: the first 16 hex digits of its hash.
func clusterKey(cluster string) string { return cluster[:16] }

// get returns the cluster's data, reading it from disk the first time;
// a cluster without a file has none yet. Called with s.mu held.
func (s *etcdStore) get(cluster string) (*etcdData, error) {
	if d := s.byCluster[cluster]; d != nil {
		return d, nil
	}
	d := &etcdData{}
	b, err := os.ReadFile(s.path(cluster))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("etcd data: %w", err)
	default:
		if err := json.Unmarshal(b, d); err != nil {
			return nil, fmt.Errorf("etcd data %s: %w", s.path(cluster), err)
		}
	}
	if s.byCluster == nil {
		s.byCluster = map[string]*etcdData{}
	}
	s.byCluster[cluster] = d
	return d, nil
}

// put replaces the cluster's data, on disk first. Called with s.mu held.
func (s *etcdStore) put(cluster string, d *etcdData) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("etcd data: %w", err)
	}
	if err := writeFile(s.dir, filepath.Base(s.path(cluster)), append(b, '\n')); err != nil {
		return fmt.Errorf("etcd data: %w", err)
	}
	if s.byCluster == nil {
		s.byCluster = map[string]*etcdData{}
	}
	s.byCluster[cluster] = d
	return nil
}

// drop deletes the cluster's data. Called with s.mu held.
func (s *etcdStore) drop(cluster string) error {
	delete(s.byCluster, cluster)
	if err := os.Remove(s.path(cluster)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("etcd data: %w", err)
	}
	return nil
}

// The simulated snapshot format: the magic line, a header (a uvarint
// length and JSON), the key/value pairs in key order (uvarint length and
// bytes of each), the filler, and a SHA-256 of all that, as etcd appends
// one to its own snapshots.
const snapshotMagic = "rezussim etcd snapshot\n"

// snapshotHeader says what follows it.
type snapshotHeader struct {
	Version  int   `json:"version"`
	Revision int64 `json:"revision"`
	Keys     int   `json:"keys"`
	Filler   int64 `json:"filler"`
}

// Limits of what a simulated snapshot may hold besides its filler: as
// etcd's request size limit per key and value, and a bound on the whole.
const (
	maxSnapshotEntry = 2 << 20
	maxSnapshotKV    = 64 << 20
)

func writeSnapshotHead(w io.Writer, d *etcdData) error {
	h, _ := json.Marshal(snapshotHeader{Version: 1, Revision: d.Revision, Keys: len(d.KV), Filler: d.Filler})
	var b []byte
	b = append(b, snapshotMagic...)
	b = binary.AppendUvarint(b, uint64(len(h)))
	b = append(b, h...)
	_, err := w.Write(b)
	return err
}

// writeSnapshot writes d as a simulated snapshot.
func writeSnapshot(w io.Writer, d *etcdData) error {
	sum := sha256.New()
	mw := io.MultiWriter(w, sum)
	if err := writeSnapshotHead(mw, d); err != nil {
		return err
	}
	keys := make([]string, 0, len(d.KV))
	for k := range d.KV {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []byte
	for _, k := range keys {
		b = binary.AppendUvarint(b[:0], uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(d.KV[k])))
		b = append(b, d.KV[k]...)
		if _, err := mw.Write(b); err != nil {
			return err
		}
	}
	block := fillerBlock()
	for left := d.Filler; left > 0; {
		n := min(left, int64(len(block)))
		if _, err := mw.Write(block[:n]); err != nil {
			return err
		}
		left -= n
	}
	_, err := w.Write(sum.Sum(nil))
	return err
}

// fillerBlock is the pattern the filler repeats: pseudo-random bytes of a
// fixed seed, the same in every process.
var fillerBlock = sync.OnceValue(func() []byte {
	b := make([]byte, 64<<10)
	r := rand.NewChaCha8(sha256.Sum256([]byte("rezussim etcd snapshot filler")))
	r.Read(b)
	return b
})

// errNotSimSnapshot is readSnapshot's answer to a stream that does not
// begin as a simulated snapshot.
var errNotSimSnapshot = errors.New("not a snapshot of this simulated etcd: it does not begin with its header")

// readSnapshot reads and checks a simulated snapshot: its header, its
// pairs, that its filler is the generated one, and its SHA-256. The
// filler is checked as it streams by, never held.
func readSnapshot(r io.Reader) (*etcdData, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	body := &hashingReader{r: br, h: sha256.New()}
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(body, magic); err != nil || string(magic) != snapshotMagic {
		return nil, errNotSimSnapshot
	}
	var h snapshotHeader
	hb, err := readChunk(body, 4096)
	if err == nil {
		err = json.Unmarshal(hb, &h)
	}
	if err != nil || h.Version != 1 || h.Keys < 0 || h.Filler < 0 {
		return nil, fmt.Errorf("the snapshot's header is not valid (%v)", err)
	}
	d := &etcdData{Revision: h.Revision, Filler: h.Filler, KV: map[string][]byte{}}
	total := 0
	for i := range h.Keys {
		k, err := readChunk(body, maxSnapshotEntry)
		if err != nil {
			return nil, fmt.Errorf("key %d of %d: %w", i+1, h.Keys, err)
		}
		v, err := readChunk(body, maxSnapshotEntry)
		if err != nil {
			return nil, fmt.Errorf("value of key %q: %w", k, err)
		}
		if total += len(k) + len(v); total > maxSnapshotKV {
			return nil, fmt.Errorf("its keys and values exceed %d bytes", maxSnapshotKV)
		}
		d.KV[string(k)] = v
	}
	if err := checkFiller(body, h.Filler); err != nil {
		return nil, err
	}
	want := body.h.Sum(nil)
	trailer := make([]byte, sha256.Size+1)
	n, _ := io.ReadFull(br, trailer)
	switch {
	case n > sha256.Size:
		return nil, errors.New("the snapshot has more bytes than its header says")
	case n < sha256.Size:
		return nil, fmt.Errorf("the snapshot does not end with its SHA-256 (%d bytes after its data)", n)
	}
	if !bytes.Equal(trailer[:n], want) {
		return nil, fmt.Errorf("the snapshot's SHA-256 does not match its data: sha256 %x, recorded %x", want, trailer[:n])
	}
	return d, nil
}

// hashingReader hashes exactly the bytes read from it.
type hashingReader struct {
	r *bufio.Reader
	h hash.Hash
}

func (r *hashingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.h.Write(p[:n])
	return n, err
}

func (r *hashingReader) ReadByte() (byte, error) {
	b, err := r.r.ReadByte()
	if err == nil {
		r.h.Write([]byte{b})
	}
	return b, err
}

// readChunk reads a uvarint length and that many bytes, at most limit.
func readChunk(r *hashingReader, limit int) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, fmt.Errorf("truncated snapshot: %w", err)
	}
	if n > uint64(limit) {
		return nil, fmt.Errorf("a length of %d bytes, over the limit of %d", n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("truncated snapshot: %w", err)
	}
	return b, nil
}

// checkFiller reads n bytes of filler and compares them with the pattern.
func checkFiller(r io.Reader, n int64) error {
	block := fillerBlock()
	buf := make([]byte, len(block))
	for off := int64(0); off < n; {
		m := min(n-off, int64(len(buf)))
		if _, err := io.ReadFull(r, buf[:m]); err != nil {
			return fmt.Errorf("truncated snapshot: %d of %d bytes of data: %w", off, n, err)
		}
		if !bytes.Equal(buf[:m], block[:m]) {
			return fmt.Errorf("the snapshot's data differ from the simulated etcd's at byte %d of %d", off, n)
		}
		off += m
	}
	return nil
}

// forgetEtcd removes the simulated etcd data of cluster once none of its
// machines is left.
func (h *Host) forgetEtcd(cluster string) {
	if cluster == "" {
		return
	}
	h.etcd.mu.Lock()
	defer h.etcd.mu.Unlock()
	h.mu.Lock()
	left := len(h.clusters[cluster])
	h.mu.Unlock()
	if left == 0 {
		if err := h.etcd.drop(cluster); err != nil {
			h.log.Warn("forget a cluster's etcd", "err", err)
		}
	}
}
