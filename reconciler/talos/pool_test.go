package talos

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPoolOwnConnections: Client shares one connection per tenant and
// machine, while Admin and Maintenance give each caller a connection of
// its own that the pool does not keep, and that closes when handed back;
// a closed pool makes no connection of any kind.
func TestPoolOwnConnections(t *testing.T) {
	r := newRig(t)
	secrets := bundle(t, "a")
	ms := r.cluster("acme", 1, 0, renderConfig(t, "acme", secrets, "controlplane"), nil)
	addr := ms[0].Address
	pool := NewPool(PoolOptions{})
	defer pool.Close()

	shared, release1, err := pool.Client("acme", secrets, addr)
	if err != nil {
		t.Fatal(err)
	}
	again, release2, err := pool.Client("acme", secrets, addr)
	if err != nil {
		t.Fatal(err)
	}
	release1()
	release2()
	if again != shared || pool.Open() != 1 {
		t.Fatalf("two Clients of one machine: the same client %v, %d open; want the same, 1", again == shared, pool.Open())
	}

	own, release, err := pool.Admin("acme", secrets, addr)
	if err != nil {
		t.Fatal(err)
	}
	other, releaseOther, err := pool.Admin("acme", secrets, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseOther()
	if own == other || own == shared || pool.Open() != 1 {
		t.Fatalf("Admin clients: shared with each other %v, with Client %v, %d kept; want none shared, 1 kept", own == other, own == shared, pool.Open())
	}
	if _, err := own.Version(ctxT(t)); err != nil {
		t.Fatalf("Version through an Admin client: %v", err)
	}
	release()
	release() // a second hand-back does nothing
	if _, err := own.Version(ctxT(t)); status.Code(err) != codes.Canceled {
		t.Fatalf("Version through an Admin client handed back: %v, want its connection closed", err)
	}
	if _, err := other.Version(ctxT(t)); err != nil {
		t.Fatalf("the other Admin client after the first was handed back: %v", err)
	}

	m, releaseM, err := pool.Maintenance(addr, "")
	if err != nil {
		t.Fatal(err)
	}
	releaseM()
	if _, err := m.Version(ctxT(t)); status.Code(err) != codes.Canceled {
		t.Fatalf("Version through a Maintenance client handed back: %v, want its connection closed", err)
	}
	if _, _, err := pool.Maintenance(addr, "not a fingerprint"); err == nil {
		t.Fatal("a Maintenance client with a fingerprint that does not parse")
	}

	pool.Close()
	if _, _, err := pool.Admin("acme", secrets, addr); !errors.Is(err, ErrPoolClosed) {
		t.Errorf("Admin of a closed pool: %v", err)
	}
	if _, _, err := pool.Maintenance(addr, ""); !errors.Is(err, ErrPoolClosed) {
		t.Errorf("Maintenance of a closed pool: %v", err)
	}
	if _, _, err := pool.Client("acme", secrets, addr); !errors.Is(err, ErrPoolClosed) {
		t.Errorf("Client of a closed pool: %v", err)
	}
}

// openAddresses returns the addresses of the shared clients the pool
// holds, in use or idle, sorted.
func (p *Pool) openAddresses() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var addrs []string
	for key := range p.conns {
		addrs = append(addrs, key.address)
	}
	slices.Sort(addrs)
	return addrs
}
