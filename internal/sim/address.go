package sim

import (
	"fmt"
	"net/netip"
)

// Ranges are the documentation networks (RFC 5737) that simulated machines
// take their addresses from, in allocation order. Nothing ever dials them.
var Ranges = []netip.Prefix{
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
}

// Capacity is how many machines the ranges hold: each /24 without its
// network and broadcast address.
const Capacity = 3 * 254

// Allocatable reports whether a is a host address of one of the Ranges.
func Allocatable(a netip.Addr) bool {
	for _, p := range Ranges {
		if p.Contains(a) && a != p.Addr() && a.As4()[3] != 255 {
			return true
		}
	}
	return false
}

// Allocate returns the lowest host address of the Ranges, in order, that is
// not in taken. The result depends only on the set taken, never on order or
// time. It fails when every address is taken.
func Allocate(taken map[netip.Addr]bool) (netip.Addr, error) {
	for _, p := range Ranges {
		for a := p.Addr().Next(); p.Contains(a); a = a.Next() {
			if a.As4()[3] == 255 {
				break
			}
			if !taken[a] {
				return a, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address: all %d addresses of %v are taken", Capacity, Ranges)
}
