package talos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
)

// gate waits until machine m may be worked on: it answers, runs and is
// ready, and, for a control plane, every etcd member is healthy. It gives
// up after Options.Wait with a *WaitingError that says what it waited for.
func (pl *Plane) gate(ctx context.Context, d Desired, m Machine) error {
	deadline := pl.opts.Now().Add(pl.opts.Wait)
	for {
		why := ""
		o := pl.prober.Fresh(ctx, d.Tenant, d.Bundle, m)
		switch {
		case !o.Connected || o.Busy() || !o.Ready:
			why = "to be ready before it is changed: " + describe(o)
		case m.ControlPlane:
			if e := pl.etcdHealthy(ctx, d); e != "" {
				why = "every etcd member to be healthy before a control plane is changed: " + e
			}
		}
		if why == "" {
			return nil
		}
		if !pl.opts.Now().Before(deadline) {
			return &WaitingError{Tenant: d.Tenant, Machine: m.label(), Reason: why}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pl.opts.Poll):
		}
	}
}

// etcdHealthy checks the tenant's etcd cluster: one control plane lists
// the members, and every member must be a control plane of the tenant
// whose own etcd reports no errors and knows the leader. It returns ""
// when all is well, else what is wrong.
func (pl *Plane) etcdHealthy(ctx context.Context, d Desired) string {
	cps := controlPlanes(d.Machines)
	if len(cps) == 0 {
		return ""
	}
	statuses := make([]memberHealth, len(cps))
	var members []string
	var listErr error
	pl.each(cps, func(i int, m Machine) {
		statuses[i].problem = "no answer"
		_ = pl.withClient(ctx, d.Tenant, d.Bundle, m, func(ctx context.Context, c *client.Client) error {
			statuses[i] = etcdStatusOf(ctx, c)
			return nil
		})
	})
	for _, m := range cps {
		err := pl.withClient(ctx, d.Tenant, d.Bundle, m, func(ctx context.Context, c *client.Client) error {
			a := etcdMembers(ctx, c)
			members, listErr = a.Members, a.Err
			if a.Err == nil && len(a.Members) == 0 {
				listErr = fmt.Errorf("no etcd members")
			}
			return a.Err
		})
		if err == nil && listErr == nil {
			break
		}
	}
	if listErr != nil {
		return "member list: " + listErr.Error()
	}
	byHost := map[string]memberHealth{}
	for _, s := range statuses {
		if s.hostname != "" {
			byHost[s.hostname] = s
		}
	}
	var problems []string
	for _, h := range members {
		s, ok := byHost[h]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("member %s does not answer as a control plane of the tenant", h))
		case s.problem != "":
			problems = append(problems, fmt.Sprintf("member %s: %s", h, s.problem))
		}
	}
	return strings.Join(problems, "; ")
}

// memberHealth is what a control plane says of its own etcd member.
type memberHealth struct {
	hostname string
	problem  string // "" when healthy
	// raftIndex and dbSize are what the member reported of its data.
	raftIndex uint64
	dbSize    int64
}

// etcdStatusOf asks a control plane how its own etcd member is: the etcd
// service must run and pass its health check (ServiceList), and the
// member must report no errors and know the leader (EtcdStatus).
func etcdStatusOf(ctx context.Context, c *client.Client) (s memberHealth) {
	resp, err := c.EtcdStatus(ctx)
	if err != nil {
		s.problem = callError("EtcdStatus", err)
		return s
	}
	msgs := resp.GetMessages()
	if len(msgs) == 0 {
		s.problem = "EtcdStatus: empty answer"
		return s
	}
	s.hostname = msgs[0].GetMetadata().GetHostname()
	st := msgs[0].GetMemberStatus()
	s.raftIndex, s.dbSize = st.GetRaftIndex(), st.GetDbSize()
	switch {
	case len(st.GetErrors()) > 0:
		s.problem = strings.Join(st.GetErrors(), "; ")
		return s
	case st.GetLeader() == 0:
		s.problem = "no leader"
		return s
	}
	var o Observation
	if err := o.readServices(ctx, c); err != nil {
		s.problem = err.Error()
	} else if !o.EtcdHealthy {
		s.problem = "the etcd service is not running and healthy"
	}
	return s
}
