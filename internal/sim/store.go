package sim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/atomicfile"
)

// ErrNotFound is returned, wrapped, by Get and SetShape when no file holds
// the machine.
var ErrNotFound = errors.New("machine not found")

// Store is a directory of machine records: one simulated cloud.
type Store struct {
	dir   string
	block Block
}

// configFile names the sim dir's own settings, written once when the dir
// is created.
const configFile = "sim.json"

// cloudConfig is the content of configFile.
type cloudConfig struct {
	// Block is B of the cloud's address block 127.B.0.0/16.
	Block Block `json:"block"`
}

// Open returns the store in dir, creating the directory (0700) if needed.
// A new directory gets its address block: a random one that no live
// process holds (see Block.Claim), recorded in <dir>/sim.json so that every
// process using the dir agrees on it.
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
	s := &Store{dir: dir}
	if s.block, err = s.readConfig(); err == nil {
		return s, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if s.block, err = s.readConfig(); err == nil {
		return s, nil // created meanwhile by another process
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if s.block, err = freeBlock(0); err != nil {
		return nil, fmt.Errorf("open machine store %s: %w", dir, err)
	}
	if err := s.writeConfig(); err != nil {
		return nil, err
	}
	return s, nil
}

// Block returns the address block of the store's machines.
func (s *Store) Block() Block { return s.block }

// Reblock gives an empty store a new address block, other than its
// current one, that no live process holds. A host whose block was claimed
// by another simulated cloud uses it; a store with machines cannot change
// its block, as their addresses would leave it.
func (s *Store) Reblock() error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	rs, err := s.List()
	if err != nil || len(rs) > 0 {
		return fmt.Errorf("machine store %s: cannot change the address block %s of a store with machines (%d, %v)", s.dir, s.block, len(rs), err)
	}
	b, err := freeBlock(s.block)
	if err != nil {
		return fmt.Errorf("machine store %s: %w", s.dir, err)
	}
	s.block = b
	return s.writeConfig()
}

func (s *Store) readConfig() (Block, error) {
	p := filepath.Join(s.dir, configFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	var c cloudConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return 0, fmt.Errorf("sim dir config %s: %w", p, err)
	}
	if !c.Block.Valid() {
		return 0, fmt.Errorf("sim dir config %s: block %d is not in 1..254", p, int(c.Block))
	}
	return c.Block, nil
}

func (s *Store) writeConfig() error {
	b, _ := json.Marshal(cloudConfig{Block: s.block})
	return atomicfile.Write(filepath.Join(s.dir, configFile), append(b, '\n'), 0o600)
}

// freeBlock picks a random block, other than not, whose claim address no
// live process holds.
func freeBlock(not Block) (Block, error) {
	var buf [1]byte
	for range 1024 {
		rand.Read(buf[:])
		b := Block(buf[0])
		if !b.Valid() || b == not {
			continue
		}
		l, err := b.Claim()
		if err == nil {
			l.Close()
			return b, nil
		}
		if !errors.Is(err, ErrBlockInUse) {
			return 0, err
		}
	}
	return 0, errors.New("no free address block: every 127.B.0.0/16 tried is held by a live process")
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
	addr, err := s.block.Allocate(taken)
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
		KubernetesAPI:  spec.KubernetesAPI,
		Address:        addr.String(),
		Hostname:       Hostname(spec.Tenant, spec.NodeGroup, id),
		UserDataSHA256: HashUserData(spec.UserData),
		CreatedAt:      now,
		UpdatedAt:      now,
	}
	if err := s.writeDisk(id, spec.UserData); err != nil {
		return Record{}, err
	}
	if err := s.write(&r); err != nil {
		os.RemoveAll(s.DiskDir(id))
		return Record{}, err
	}
	return r, nil
}

// DiskDir returns the directory that holds the disk of machine id:
// <dir>/disk/<id>. The provider writes the machine's user data there
// (UserDataFile) when it creates the machine; the machine, once it runs as a
// simulated Talos node, keeps its own state beside it. id must be valid
// (ValidDiskID).
func (s *Store) DiskDir(id string) string { return filepath.Join(s.dir, DisksDir, id) }

// DisksDir is the folder of a sim dir that holds the machines' disks.
const DisksDir = "disk"

// UserDataFile names the file of a machine's disk that holds the user data
// it was created with (its Talos config), mode 0600.
const UserDataFile = "user-data"

// UserData reads the user data machine id was created with.
func (s *Store) UserData(id string) ([]byte, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("machine id %q is not of the form sim-<16 hex digits>", id)
	}
	b, err := os.ReadFile(filepath.Join(s.DiskDir(id), UserDataFile))
	if err != nil {
		return nil, fmt.Errorf("read user data of machine %s: %w", id, err)
	}
	return b, nil
}

// writeDisk creates the disk of machine id (0700) holding its user data.
func (s *Store) writeDisk(id string, userData []byte) error {
	d := s.DiskDir(id)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return fmt.Errorf("create disk of machine %s: %w", id, err)
	}
	if err := atomicfile.Write(filepath.Join(d, UserDataFile), userData, 0o600); err != nil {
		return fmt.Errorf("write user data of machine %s: %w", id, err)
	}
	return nil
}

// ValidDiskID reports whether id may name a disk: 1-128 of letters,
// digits, '.', '_' and '-', not starting with '.' or '-'. Machines of other
// simulated clouds (OpenStack server ids, metal machines) keep their disks
// in the same folder under their own ids.
func ValidDiskID(id string) bool { return diskIDPattern.MatchString(id) }

var diskIDPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// SetShape changes a machine's shape, and whether its cluster runs a
// Kubernetes API, in place; everything else, address included, stays.
func (s *Store) SetShape(id, shape string, kubernetesAPI bool, now time.Time) (Record, error) {
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
	r.KubernetesAPI = kubernetesAPI
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
	// The disk goes with the machine. A node host may still be writing its
	// state there while it notices the record is gone: try again then.
	for range 5 {
		if err = os.RemoveAll(s.DiskDir(id)); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("delete disk of machine %s: %w", id, err)
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
