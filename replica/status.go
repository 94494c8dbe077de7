package replica

import (
	"sort"
	"time"
)

// Status is the replicas' part of the server's status. Its fields are
// those of the API's ReplicasStatus, so that the server converts one
// into the other.
type Status struct {
	// Self is the name of this replica.
	Self string
	// Leader is the name of the leader, "" while none is elected.
	Leader string
	// Shards is how many shards the tenants are spread over.
	Shards int
	// Members are the live replicas, by name.
	Members []Member
	// Unowned counts the shards that no live replica holds now.
	Unowned int
}

// Member is one live replica.
type Member struct {
	Name string
	// Address is the base URL of the replica's API, as it advertises it.
	Address string
	// Since is when its current membership began.
	Since time.Time
	// Leader says whether it is the leader.
	Leader bool
	// Shards and Tenants count the shards it holds and the tenants in
	// them, of the tenants given to Status.
	Shards  int
	Tenants int
}

// Status reports the replicas as this replica last saw them in etcd;
// tenants are the tenants to count in each member's shards.
func (r *Replica) Status(tenants []string) Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Status{Self: r.cfg.Name, Leader: r.view.leader(), Shards: r.cfg.Shards}
	holders := r.view.holders()
	byName := map[string]*Member{}
	for name, rec := range r.view.members() {
		byName[name] = &Member{Name: name, Address: rec.Address, Since: rec.Since, Leader: name == st.Leader}
	}
	for s := range r.cfg.Shards {
		h, ok := holders[s]
		if m := byName[h.name]; ok && m != nil {
			m.Shards++
			continue
		}
		st.Unowned++
	}
	for _, t := range tenants {
		if m := byName[holders[ShardOf(t, r.cfg.Shards)].name]; m != nil {
			m.Tenants++
		}
	}
	for _, m := range byName {
		st.Members = append(st.Members, *m)
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].Name < st.Members[j].Name })
	return st
}
