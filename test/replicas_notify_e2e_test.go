package test

import (
	"slices"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/notify"
)

// TestReplicasTellReplicaLost: three replicas with notifications. A
// follower killed is told of by the leader; the leader killed is told of
// by the replica that takes over from it; each once, to the webhook,
// naming the replica.
func TestReplicasTellReplicaLost(t *testing.T) {
	recv := newNotifyReceiver(t)
	cfg := recv.config(t.TempDir())
	r := startRig(t, rigOptions{args: []string{"--notifications", cfg}})
	leader := r.waitLeader(r.names...)
	followers := others(r.names, leader)
	lost := func(name string) []hookMessage {
		var out []hookMessage
		for _, m := range recv.hooked(notify.ReplicaLost, "") {
			if m.Replica == name {
				out = append(out, m)
			}
		}
		return out
	}

	r.servers[followers[0]].Kill()
	s := r.servers[leader]
	s.WaitFor("ReplicaLost of the killed follower "+followers[0], func() bool { return len(lost(followers[0])) > 0 })
	r.waitLeader(leader, followers[1])

	r.servers[leader].Kill()
	s = r.servers[followers[1]]
	r.waitLeader(followers[1])
	s.WaitFor("ReplicaLost of the killed leader "+leader, func() bool { return len(lost(leader)) > 0 })

	time.Sleep(2 * time.Second) // a second message would come within the members' next looks
	for _, name := range []string{followers[0], leader} {
		ms := lost(name)
		if len(ms) != 1 || ms[0].Severity != notify.SeverityError || ms[0].Tenant != "" {
			t.Errorf("ReplicaLost of %s: %+v, want one error without a tenant", name, ms)
		}
	}
	if got := lost(followers[1]); len(got) != 0 {
		t.Errorf("ReplicaLost of the live replica %s: %+v", followers[1], got)
	}
	var told []string
	for _, m := range recv.hooked(notify.ReplicaLost, "") {
		told = append(told, m.Replica)
	}
	slices.Sort(told)
	t.Logf("ReplicaLost told of %v", told)
}
