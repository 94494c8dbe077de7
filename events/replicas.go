package events

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rezuscloud/rezuscloud/notify"
)

// MembersOptions configure WatchMembers. Members, Leading and Sink are
// required.
type MembersOptions struct {
	// Self is this replica's name: it never tells of itself.
	Self string
	// Members returns the names of the live replicas, as this replica
	// sees them now (each one's membership is bound to its lease).
	Members func() []string
	// Leading reports whether this replica leads now.
	Leading func() bool
	// Leader returns the name of the replica that leads now, "" when
	// none does. A member that leaves while another replica leads, which
	// lives on, is that leader's to tell of; nil: this replica tells of
	// every member it saw leave within Window, when it leads.
	Leader func() string
	Sink   notify.Sink
	// Interval is how often the members are looked at. Default 1 s.
	Interval time.Duration
	// Window is how long a replica that does not lead keeps a member it
	// saw leave, so that it tells of it if it becomes the leader meanwhile
	// (the leader that died is the one it takes over from). Default 1 min.
	Window time.Duration
	// Clock is the time events go by; nil is the system's.
	Clock Clock
}

// WatchMembers tells of every replica whose membership ends, while it
// runs, until ctx ends: ReplicaLost, sent by the leader only, so that
// several replicas tell it once. A replica that does not lead keeps what
// it saw leave for Window, and tells of it when it becomes the leader.
func WatchMembers(ctx context.Context, o MembersOptions) {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	w := &memberWatch{o: o, seen: o.Members()}
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.Clock.After(o.Interval):
		}
		w.look()
	}
}

// memberWatch is what WatchMembers keeps between looks.
type memberWatch struct {
	o    MembersOptions
	seen []string
	// gone are the members seen leaving and not told of yet, with when.
	gone []goneMember
}

type goneMember struct {
	name string
	at   time.Time
	// leader led when the member was seen leaving.
	leader string
}

// leaderTells is how long a leader that lives on has to tell of a member
// that left: it looks every second and tells at once.
const leaderTells = 3 * time.Second

// look compares the members with those seen before, and tells of those
// gone when this replica leads.
func (w *memberWatch) look() {
	now, members, leader := w.o.Clock.Now(), w.o.Members(), ""
	if w.o.Leader != nil {
		leader = w.o.Leader()
	}
	for _, name := range w.seen {
		if name != w.o.Self && !slices.Contains(members, name) {
			w.gone = append(w.gone, goneMember{name: name, at: now, leader: leader})
		}
	}
	w.seen = members
	w.gone = slices.DeleteFunc(w.gone, func(g goneMember) bool {
		toldByLeader := g.leader != "" && g.leader != w.o.Self && g.leader != g.name &&
			slices.Contains(members, g.leader) && now.Sub(g.at) >= leaderTells
		return now.Sub(g.at) > w.o.Window || slices.Contains(members, g.name) || toldByLeader // or it joined again
	})
	if len(w.gone) == 0 || !w.o.Leading() {
		return
	}
	for _, g := range w.gone {
		w.o.Sink.Notify(notify.Event{Reason: notify.ReplicaLost, Severity: notify.SeverityError, Replica: g.name,
			Message: fmt.Sprintf("replica %s is gone: its lease in etcd ended (it stopped, crashed or lost etcd); the replicas that remain take over its work", g.name),
			Time:    g.at})
	}
	w.gone = nil
}
