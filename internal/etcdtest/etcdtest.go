// Package etcdtest starts, for a test, a real etcd cluster of one or more
// members in the test's process (go.etcd.io/etcd/server/v3/embed), on a
// loopback address of its own, and stops it when the test ends. Members
// can be killed and started again, to test what a store or a replica does
// while etcd loses its quorum. Only tests import it.
package etcdtest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// readyWithin bounds how long a member may take to serve.
const readyWithin = 30 * time.Second

// Cluster is a running etcd of one or more members.
type Cluster struct {
	t       testing.TB
	members []*member
}

// member is one etcd member, running or killed.
type member struct {
	mu  sync.Mutex
	cfg *embed.Config
	e   *embed.Etcd // nil while killed
}

// portAttempts bounds how often Start picks new ports: another process
// may bind a port between its choice and etcd's own bind.
const portAttempts = 5

// Start starts a cluster of n members on a random loopback address and
// waits until it serves. It is stopped when the test ends.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	for attempt := 1; ; attempt++ {
		c, err := tryStart(t, n)
		if err == nil {
			return c
		}
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == portAttempts {
			t.Fatal(err)
		}
		t.Logf("etcd: %v; choosing other ports", err)
	}
}

// tryStart starts a new cluster of n members on ports chosen now; on an
// error, every member it started is stopped.
func tryStart(t testing.TB, n int) (*Cluster, error) {
	urls := freeURLs(t, loopback(), 2*n)
	var initial []string
	c := &Cluster{t: t}
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = t.TempDir()
		cfg.LogLevel = "error"
		cfg.ListenClientUrls = []url.URL{urls[2*i]}
		cfg.AdvertiseClientUrls = cfg.ListenClientUrls
		cfg.ListenPeerUrls = []url.URL{urls[2*i+1]}
		cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
		cfg.ListenMetricsUrls = nil
		cfg.InitialClusterToken = "etcdtest"
		initial = append(initial, cfg.Name+"="+cfg.ListenPeerUrls[0].String())
		c.members = append(c.members, &member{cfg: cfg})
	}
	for _, m := range c.members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
	}
	// Members of a new cluster wait for each other, so they start at once.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range c.members {
		wg.Go(func() { errs[i] = c.members[i].start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.killAll()
		return nil, err
	}
	t.Cleanup(c.killAll)
	return c, nil
}

// killAll stops every member.
func (c *Cluster) killAll() {
	for i := range c.members {
		c.Kill(i)
	}
}

// start starts the member and waits until it serves.
func (m *member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e != nil {
		return nil
	}
	e, err := embed.StartEtcd(m.cfg)
	if err != nil {
		return fmt.Errorf("etcd member %s: %w", m.cfg.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd member %s: %w", m.cfg.Name, err)
	case <-time.After(readyWithin):
		e.Close()
		return fmt.Errorf("etcd member %s did not serve within %s", m.cfg.Name, readyWithin)
	}
	m.e = e
	return nil
}

// Endpoints returns the client URLs of every member, killed ones
// included, as a client is configured with them.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.cfg.AdvertiseClientUrls[0].String())
	}
	return eps
}

// Kill stops member i at once, as a crash would; its data stays for
// Restart. Killing a killed member does nothing.
func (c *Cluster) Kill(i int) {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e != nil {
		m.e.Close()
		m.e = nil
	}
}

// Restart starts member i again from its data, and waits until it
// serves; while the cluster has no quorum, a member serves only once
// enough others are back, so restart those at once (in goroutines).
func (c *Cluster) Restart(i int) error {
	m := c.members[i]
	m.cfg.ClusterState = embed.ClusterStateFlagExisting
	return m.start()
}

// Client returns a client of the cluster, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Healthy reports whether the cluster answers a linearizable read within
// d.
func (c *Cluster) Healthy(ctx context.Context, cli *clientv3.Client, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := cli.Get(ctx, "health")
	return err == nil
}

// loopback returns a random address of 127.240.0.0/16, so that test
// processes running at once rarely share one.
func loopback() string {
	var r [2]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("127.240.%d.%d", r[0], r[1]%250+1)
}

// freeURLs returns n http URLs on addr, each with a port free now and
// no two alike: every port stays bound until all are chosen, since a port
// released at once may be handed out again by the next bind (a member's
// client and peer URLs on one port fail with "address already in use").
func freeURLs(t testing.TB, addr string, n int) []url.URL {
	t.Helper()
	urls := make([]url.URL, n)
	for i := range urls {
		l, err := net.Listen("tcp", addr+":0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		urls[i] = url.URL{Scheme: "http", Host: l.Addr().String()}
	}
	return urls
}
