package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/rezuscloud/rezuscloud/history"
	"github.com/rezuscloud/rezuscloud/reconciler"
	"github.com/rezuscloud/rezuscloud/reconciler/talos"
)

// historyFlags say how long the history of machines and tenants is kept,
// how often the machines' gauges are sampled, and whether the Talos plane
// follows the machines by watches or by probes alone.
type historyFlags struct {
	full, step, keep time.Duration
	sampleInterval   time.Duration
	talosWatch       bool
	talosWatchMax    int
}

func addHistoryFlags(fs *pflag.FlagSet, f *historyFlags) {
	fs.DurationVar(&f.full, "history-full", history.DefaultFull, "how long the machines' gauges are kept at full resolution (a sample a minute) before they are downsampled to --history-step")
	fs.DurationVar(&f.step, "history-step", history.DefaultStep, "the resolution gauges older than --history-full are downsampled to: whole minutes that divide a day")
	fs.DurationVar(&f.keep, "history-keep", history.DefaultKeep, "how long any history (transitions, availability, marks, gauges) is kept")
	fs.DurationVar(&f.sampleInterval, "history-sample-interval", time.Minute, "how often the gauges of every connected machine (load, memory, etcd DB size and leader) are sampled; the history keeps one a minute at most")
	fs.IntVar(&f.talosWatchMax, "talos-watch-max", talos.DefaultMaxWatched, "follow at most `N` machines by watches (control planes first), each about 155 KiB of memory; the others follow by one events stream per tenant, probed at once on an event and every 5 minutes otherwise (once per --probe-ttl while off the stream); -1: no bound")
	fs.BoolVar(&f.talosWatch, "talos-watch", true, "follow each connected machine's resources by watches, probing only a machine whose watch broke; false probes every machine once per --probe-ttl")
}

// options checks the flags and returns the history's options.
func (f *historyFlags) options() (reconciler.HistoryOptions, error) {
	r := history.Options{Full: f.full, Step: f.step, Keep: f.keep}
	if err := r.Validate(); err != nil {
		return reconciler.HistoryOptions{}, err
	}
	if f.sampleInterval < time.Second {
		return reconciler.HistoryOptions{}, fmt.Errorf("--history-sample-interval %s: want at least 1s", f.sampleInterval)
	}
	return reconciler.HistoryOptions{Retention: r}, nil
}

// runHistory runs the history's retention beside the loop, until ctx
// ends.
func (p *reconcilerPart) runHistory(ctx context.Context) {
	o, _ := p.f.history.options() // checked by serverConfig
	o.Logger, o.Now = p.log.With("component", "history"), p.now
	reconciler.RunHistoryRetention(ctx, p.m.Server.Store(), o)
}
