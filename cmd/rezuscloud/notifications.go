package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rezuscloud/rezuscloud/events"
	"github.com/rezuscloud/rezuscloud/notify"
)

// openNotifications reads the notifications config (--notifications)
// and builds the Notifier, whose test messages the API sends on every
// replica, and, with a source, the deriver of events, registered with the
// store. Both run while the reconciler's part runs (runNotifications): on
// a replica, while it leads. A config with a mistake stops the start,
// with its file and line.
func (m *Main) openNotifications() error {
	path := m.flags.notifications
	if path == "" {
		return nil
	}
	cfg, err := notify.LoadConfig(path)
	if err != nil {
		return fmt.Errorf("--notifications: %w", err)
	}
	reg := m.metrics.Registerer()
	if m.rec != nil && m.metrics == nil {
		reg = m.rec.metrics.Registerer()
	}
	log := m.log.With("component", "notifications")
	n, err := notify.New(cfg, notify.Options{Logger: log, Registerer: reg})
	if err != nil {
		return fmt.Errorf("--notifications %s: %w", path, err)
	}
	m.notifier = n
	m.Server.ServeNotifications(n)
	if m.src != nil {
		m.events, err = events.New(events.Options{Store: m.Server.Store(), Sink: n, ExternalURL: m.flags.dashboardURL(""),
			MachineNotReadyAfter: cfg.MachineNotReadyAfter, Registerer: reg, Logger: log})
		if err != nil {
			return err
		}
	}
	log.Info("notifications", "config", path, "providers", n.Providers(), "alerts", len(cfg.Alerts))
	return nil
}

// runNotifications runs the delivery of notifications and the deriver of
// events until ctx ends, with goRun.
func (m *Main) runNotifications(ctx context.Context, goRun func(func())) {
	if m.notifier == nil {
		return
	}
	goRun(func() { m.notifier.Run(ctx) })
	if m.events != nil {
		goRun(func() {
			if err := m.events.Run(ctx); err != nil {
				m.log.Error("notifications: the deriver of events stopped", "err", err)
			}
		})
	}
}

// watchReplicas tells of replicas that are gone (events.WatchMembers),
// from the leader, until ctx ends; nothing without notifications.
func (m *Main) watchReplicas(ctx context.Context) {
	if m.notifier == nil {
		return
	}
	r := m.replica
	events.WatchMembers(ctx, events.MembersOptions{
		Self: r.Status(nil).Self,
		Members: func() []string {
			var names []string
			for _, mb := range r.Status(nil).Members {
				names = append(names, mb.Name)
			}
			return slices.Clip(names)
		},
		Leading: func() bool { _, ok := r.Leader(); return ok },
		Leader:  func() string { return r.Status(nil).Leader },
		Sink:    m.notifier,
		Window:  max(time.Minute, 3*m.flags.replica.leaseTTL),
	})
}
