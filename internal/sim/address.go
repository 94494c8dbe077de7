package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Block is the address block of one simulated cloud: the loopback network
// 127.B.0.0/16, B in 1..254. Every machine of a sim dir gets its address
// from the dir's block, so simulated machines only ever live on loopback,
// and simulated clouds with different blocks never share an address.
type Block uint8

// TalosPort is the port of the Talos API (apid) on every simulated machine.
const TalosPort = 50000

// Capacity is how many machine addresses a block holds: 127.B.x.y with x
// in 0..255 and y in 1..254, less the block's claim address.
const Capacity = 256*254 - 1

// Valid reports whether b names a block: 127.0.x.x (where 127.0.0.1
// lives) and 127.255.x.x are never used.
func (b Block) Valid() bool { return b >= 1 && b <= 254 }

// Prefix returns 127.B.0.0/16.
func (b Block) Prefix() netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(b), 0, 0}), 16)
}

// String returns the block as a CIDR.
func (b Block) String() string { return b.Prefix().String() }

// ClaimAddr is 127.B.255.254:50000. The process that serves a block's
// machines (the Talos node host) holds a listener there for its lifetime,
// which is how other processes tell that the block is in use. It is never
// handed out to a machine.
func (b Block) ClaimAddr() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, byte(b), 255, 254}), TalosPort)
}

// Contains reports whether a is a machine address of the block.
func (b Block) Contains(a netip.Addr) bool {
	if !b.Valid() || !a.Is4() || !b.Prefix().Contains(a) {
		return false
	}
	o := a.As4()
	return o[3] != 0 && o[3] != 255 && a != b.ClaimAddr().Addr()
}

// Allocate returns the lowest machine address of the block that is not in
// taken. The result depends only on the set taken, never on order or time.
// It fails when every address is taken.
func (b Block) Allocate(taken map[netip.Addr]bool) (netip.Addr, error) {
	if !b.Valid() {
		return netip.Addr{}, fmt.Errorf("no address block: %d is not in 1..254", int(b))
	}
	for x := 0; x < 256; x++ {
		for y := 1; y < 255; y++ {
			a := netip.AddrFrom4([4]byte{127, byte(b), byte(x), byte(y)})
			if b.Contains(a) && !taken[a] {
				return a, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address: all %d addresses of %s are taken", Capacity, b)
}

// Loopback reports whether a is an address a simulated machine may have:
// IPv4 in 127.0.0.0/8 outside 127.0.x.x.
func Loopback(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	o := a.As4()
	return o[0] == 127 && o[1] != 0
}

// ErrBlockInUse is returned, wrapped, by Claim when another socket holds
// the block's claim address.
var ErrBlockInUse = errors.New("address block in use")

// Claim binds the block's claim address and returns the listener; closing
// it releases the block. A block held by another live process gives an
// error wrapping ErrBlockInUse.
func (b Block) Claim() (net.Listener, error) {
	if !b.Valid() {
		return nil, fmt.Errorf("claim address block: %d is not in 1..254", int(b))
	}
	l, err := net.Listen("tcp4", b.ClaimAddr().String())
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%w: %s is held by another process (%s)", ErrBlockInUse, b, b.ClaimAddr())
	}
	if err != nil {
		return nil, fmt.Errorf("claim address block %s: %w", b, err)
	}
	return l, nil
}

// WaitGone waits until nothing answers on the Talos port of the machine
// address addr, as a cloud's delete returns once the instance is gone: the
// host of the simulated nodes notices a deleted machine record a moment
// later, and until then the old node would still answer at an address the
// next machine may be given. It returns at once when nothing listens
// there, and gives up after max or when ctx ends.
func WaitGone(ctx context.Context, addr string, max time.Duration) {
	a, err := netip.ParseAddr(addr)
	if err != nil || !Loopback(a) {
		return
	}
	target := netip.AddrPortFrom(a, TalosPort).String()
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c, err := net.DialTimeout("tcp", target, 200*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
}
