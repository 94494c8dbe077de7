package sim

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
)

// ErrNotFound is returned, wrapped, by Get and SetShape when no file holds
// the machine.
var ErrNotFound = errors.New("machine not found")

// Store is a directory of machine records.
type Store struct {
	dir string
}

// Open returns the store in dir, creating the directory (0700) if needed.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open machine store: no directory given")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open machine store: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("open machine store: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("open machine store: %s is not a directory", dir)
	}
	return &Store{dir: dir}, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Path returns the file that holds machine id. It is only meaningful for a
// valid id.
func (s *Store) Path(id string) string { return filepath.Join(s.dir, id+".json") }

// Get reads machine id. A missing file gives an error wrapping ErrNotFound.
func (s *Store) Get(id string) (Record, error) {
	if !ValidID(id) {
		return Record{}, fmt.Errorf("machine id %q is not of the form sim-<16 hex digits>", id)
	}
	return s.read(id)
}

func (s *Store) read(id string) (Record, error) {
	p := s.Path(id)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, fmt.Errorf("%w: %s (no file %s)", ErrNotFound, id, p)
	}
	if err != nil {
		return Record{}, fmt.Errorf("read machine %s: %w", id, err)
	}
	r, err := Unmarshal(b)
	if err != nil {
		return Record{}, fmt.Errorf("machine file %s: %w", p, err)
	}
	if r.ID != id {
		return Record{}, fmt.Errorf("machine file %s: holds id %q", p, r.ID)
	}
	return r, nil
}

// List reads every machine file in the store, sorted by id. Files whose
// names are not "<id>.json" are not machines and are skipped. A machine file
// that cannot be read or parsed is left out and reported in the returned
// error (several are joined), so a caller can choose to go on with the rest.
func (s *Store) List() ([]Record, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	var (
		out  []Record
		errs []error
	)
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !ValidID(id) || e.IsDir() {
			continue
		}
		r, err := s.read(id)
		if errors.Is(err, ErrNotFound) {
			continue // deleted since ReadDir
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, errors.Join(errs...)
}

// Create allocates an id, a host name and the lowest free address for a new
// machine and writes its record, created at now. It refuses to allocate
// while any machine file is unreadable: its address would be unknown.
func (s *Store) Create(spec Spec, now time.Time) (Record, error) {
	if err := spec.Check(); err != nil {
		return Record{}, fmt.Errorf("create machine: %w", err)
	}
	unlock, err := s.lock()
	if err != nil {
		return Record{}, err
	}
	defer unlock()

	existing, err := s.List()
	if err != nil {
		return Record{}, fmt.Errorf("create machine: cannot allocate an address: %w", err)
	}
	taken := make(map[netip.Addr]bool, len(existing))
	used := make(map[string]bool, 2*len(existing)) // ids and host names
	for _, r := range existing {
		taken[netip.MustParseAddr(r.Address)] = true
		used[r.ID] = true
		used[r.Hostname] = true
	}
	addr, err := Allocate(taken)
	if err != nil {
		return Record{}, fmt.Errorf("create machine %s/%s/%s: %w", spec.Tenant, spec.NodeGroup, spec.Name, err)
	}
	id := newID()
	for used[id] || used[Hostname(spec.Tenant, spec.NodeGroup, id)] {
		id = newID()
	}
	now = now.UTC()
	r := Record{
		ID:             id,
		Name:           spec.Name,
		Tenant:         spec.Tenant,
		NodeGroup:      spec.NodeGroup,
		Role:           spec.Role,
		Shape:          spec.Shape,
		Image:          spec.Image,
		Address:        addr.String(),
		Hostname:       Hostname(spec.Tenant, spec.NodeGroup, id),
		UserDataSHA256: HashUserData(spec.UserData),
		CreatedAt:      now,
		UpdatedAt:      now,
	}
	if err := s.write(&r); err != nil {
		return Record{}, err
	}
	return r, nil
}

// SetShape changes a machine's shape in place; everything else, address
// included, stays.
func (s *Store) SetShape(id, shape string, now time.Time) (Record, error) {
	if shape == "" {
		return Record{}, fmt.Errorf("set shape of machine %s: shape is empty", id)
	}
	if !ValidID(id) {
		return Record{}, fmt.Errorf("machine id %q is not of the form sim-<16 hex digits>", id)
	}
	unlock, err := s.lock()
	if err != nil {
		return Record{}, err
	}
	defer unlock()
	r, err := s.read(id)
	if err != nil {
		return Record{}, err
	}
	r.Shape = shape
	r.UpdatedAt = now.UTC()
	if err := s.write(&r); err != nil {
		return Record{}, err
	}
	return r, nil
}

// Delete removes machine id. Deleting a machine that is already gone is not
// an error.
func (s *Store) Delete(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("machine id %q is not of the form sim-<16 hex digits>", id)
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Remove(s.Path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete machine %s: %w", id, err)
	}
	return nil
}

// write stores r atomically (see package atomicfile).
func (s *Store) write(r *Record) error {
	if err := r.Check(); err != nil {
		return fmt.Errorf("write machine %s: %w", r.ID, err)
	}
	b, err := r.Marshal()
	if err != nil {
		return fmt.Errorf("write machine %s: %w", r.ID, err)
	}
	if err := atomicfile.Write(s.Path(r.ID), b, 0o600); err != nil {
		return fmt.Errorf("write machine %s: %w", r.ID, err)
	}
	return nil
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return "sim-" + hex.EncodeToString(b[:])
}
