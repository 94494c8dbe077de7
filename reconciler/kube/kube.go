// Package kube is the Talos plane's client of each tenant's Kubernetes
// API: it holds, per tenant and in memory only, an admin credential
// issued from the tenant's secrets bundle and the client-go clients made
// with it. It observes the API (whether /readyz says ok, and the Nodes
// with their readiness, schedulability and kubelet versions), and it
// cordons, drains (k8s.io/kubectl's drain package, through the eviction
// API), uncordons and deletes Nodes when the plane asks.
//
// It dials the tenant's controlPlaneEndpoint when that names an IP
// address, and the control planes' addresses at port 6443 when the
// endpoint does not answer, as talosctl does. An endpoint given by DNS
// name is never resolved here: the control planes are dialled instead, so
// that no observation depends on, or leaks to, a name server. An API that
// cannot be reached is an observation like any other, never an error of
// the caller's.
//
// It owns no state beyond that cache: it decides nothing (the plane says
// when to drain and with which policy), writes nothing to the store and
// imports nothing of the reconciler but render/talos, which derives the
// credential.
package kube

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rezuscloud/rezuscloud/render/talos"
)

// APIPort is the port of kube-apiserver on a Talos control plane.
const APIPort = 6443

// Target is a tenant's Kubernetes API as the plane knows it.
type Target struct {
	Tenant string
	// Endpoint is the tenant's controlPlaneEndpoint.
	Endpoint string
	// ControlPlanes are the management addresses of its control planes.
	ControlPlanes []netip.Addr
	// Bundle is the tenant's secrets bundle.
	Bundle []byte
}

// Observation is what one look at a tenant's API saw.
type Observation struct {
	// URL is the address that answered; empty when none did.
	URL string
	// Ready: /readyz answered ok.
	Ready bool
	// Problem says why the API is not ready: every address tried and its
	// error, or what /readyz answered.
	Problem string
	// Nodes are the cluster's Nodes, by name, when the API answered.
	Nodes []Node
}

// Node is one Node of the cluster.
type Node struct {
	Name string
	// InternalIP is the address its kubelet reports as InternalIP.
	InternalIP string
	// Ready is its Ready condition; Schedulable is false once cordoned.
	Ready, Schedulable bool
	KubeletVersion     string
	Conditions         []Condition
}

// Condition is one condition of a Node.
type Condition struct {
	Type, Status, Reason, Message string
	// Since is when the condition last changed its status.
	Since time.Time
}

// Options configure the clients.
type Options struct {
	// Timeout bounds each request; default 3 s.
	Timeout time.Duration
	// Validity of the admin credential, which is issued again when half
	// of it has passed; default 24 h.
	Validity time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Clients are the clients of every tenant's API.
type Clients struct {
	opts     Options
	mu       sync.Mutex
	byTenant map[string]*tenantClients
}

// tenantClients are the clients of one tenant, for one bundle. Its
// credential is issued, and parsed, at the first URL that takes a
// connection: a tenant whose API refuses (its control planes not up yet)
// costs neither the signature nor the memory of a credential it cannot
// use.
type tenantClients struct {
	bundle  [32]byte
	issued  time.Time
	tls     *tls.Config // the credential's, parsed once: a client made again reuses it
	byURL   map[string]kubernetes.Interface
	lastURL string // the URL that answered last, tried first
}

// NewClients returns an empty cache of clients.
func NewClients(opts Options) *Clients {
	if opts.Timeout <= 0 {
		opts.Timeout = 3 * time.Second
	}
	if opts.Validity <= 0 {
		opts.Validity = 24 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Clients{opts: opts, byTenant: map[string]*tenantClients{}}
}

// Forget drops a tenant's clients and credential.
func (c *Clients) Forget(tenant string) {
	c.mu.Lock()
	delete(c.byTenant, tenant)
	c.mu.Unlock()
}

// Observe looks at the tenant's API: the first address that answers is
// asked /readyz and the Nodes.
func (c *Clients) Observe(ctx context.Context, t Target) Observation {
	urls := URLs(t.Endpoint, t.ControlPlanes)
	if len(urls) == 0 {
		return Observation{Problem: "no address to dial: the endpoint names no IP address and no control plane has one"}
	}
	tc := c.tenant(t)
	var tried []string
	for _, u := range tc.order(urls) {
		cs, err := c.client(ctx, tc, t.Bundle, u)
		var ce *credentialError
		if errors.As(err, &ce) {
			return Observation{Problem: ce.Error()}
		}
		if err == nil {
			var o Observation
			if o, err = c.observe(ctx, cs, u); err == nil {
				c.mu.Lock()
				tc.lastURL = u
				c.mu.Unlock()
				return o
			}
		}
		c.forgetURL(tc, u)
		tried = append(tried, u+": "+oneLine(err))
	}
	return Observation{Problem: "no answer: " + strings.Join(tried, "; ")}
}

// observe asks /readyz and lists the Nodes at one URL; an error means the
// API did not answer there.
func (c *Clients) observe(ctx context.Context, cs kubernetes.Interface, u string) (Observation, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	o := Observation{URL: u}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	switch {
	case err == nil && strings.TrimSpace(string(body)) == "ok":
		o.Ready = true
	case err == nil:
		o.Problem = "/readyz: " + oneLine(fmt.Errorf("%s", body))
	case isNoAnswer(err):
		return o, err
	default:
		o.Problem = "/readyz: " + oneLine(err)
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		if isNoAnswer(err) {
			return o, err
		}
		o.Problem = strings.TrimPrefix(o.Problem+"; ", "; ") + "list nodes: " + oneLine(err)
		return o, nil
	}
	for i := range nodes.Items {
		o.Nodes = append(o.Nodes, nodeOf(&nodes.Items[i]))
	}
	return o, nil
}

// URLs are the addresses to dial, in order: the endpoint when it names an
// IP address, then each control plane at APIPort.
func URLs(endpoint string, controlPlanes []netip.Addr) []string {
	var out []string
	if u, err := url.Parse(endpoint); err == nil && u.Scheme == "https" {
		if _, err := netip.ParseAddr(u.Hostname()); err == nil {
			out = append(out, "https://"+u.Host)
		}
	}
	for _, a := range controlPlanes {
		u := "https://" + net.JoinHostPort(a.String(), strconv.Itoa(APIPort))
		if len(out) == 0 || out[0] != u {
			out = append(out, u)
		}
	}
	return out
}

// tenant returns the tenant's clients, new ones when it has none for its
// bundle or half of its credential's validity has passed.
func (c *Clients) tenant(t Target) *tenantClients {
	sum := sha256.Sum256(t.Bundle)
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	tc := c.byTenant[t.Tenant]
	if tc != nil && tc.bundle == sum && (tc.tls == nil || now.Sub(tc.issued) < c.opts.Validity/2) {
		return tc
	}
	tc = &tenantClients{bundle: sum, byURL: map[string]kubernetes.Interface{}}
	c.byTenant[t.Tenant] = tc
	return tc
}

// credentialError is a credential that could not be made from a bundle.
type credentialError struct{ err error }

func (e *credentialError) Error() string { return "no credential for the API: " + e.err.Error() }
func (e *credentialError) Unwrap() error { return e.err }

// tlsOf returns the TLS configuration of the tenant's credential, issued
// from bundle at its first use.
func (c *Clients) tlsOf(tc *tenantClients, bundle []byte) (*tls.Config, error) {
	c.mu.Lock()
	cfg := tc.tls
	c.mu.Unlock()
	if cfg != nil {
		return cfg, nil
	}
	now := c.opts.Now()
	// Backdated a minute, so that a clock a little behind ours accepts it.
	cred, err := talos.KubernetesAdmin(bundle, c.opts.Validity, now.Add(-time.Minute))
	if err != nil {
		return nil, &credentialError{err}
	}
	if cfg, err = tlsConfigOf(cred); err != nil {
		return nil, &credentialError{err}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if tc.tls == nil {
		tc.tls, tc.issued = cfg, now
	}
	return tc.tls, nil
}

// order puts the URL that answered last first.
func (tc *tenantClients) order(urls []string) []string {
	for i, u := range urls {
		if u == tc.lastURL && i > 0 {
			return append([]string{u}, append(append([]string(nil), urls[:i]...), urls[i+1:]...)...)
		}
	}
	return urls
}

// client returns the tenant's client for one URL. A client is built only
// for a URL that takes a TCP connection: a client costs its transport and
// client-go's typed clients, and forgetURL drops it when its API does not
// answer, so an API that refuses (a control plane whose kube-apiserver is
// not up) would cost a new one at every look.
func (c *Clients) client(ctx context.Context, tc *tenantClients, bundle []byte, u string) (kubernetes.Interface, error) {
	c.mu.Lock()
	cs, ok := tc.byURL[u]
	c.mu.Unlock()
	if ok {
		return cs, nil
	}
	if err := c.dialable(ctx, u); err != nil {
		return nil, err
	}
	tlsConfig, err := c.tlsOf(tc, bundle)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs, ok := tc.byURL[u]; ok {
		return cs, nil
	}
	// A transport of the tenant's own rather than one of client-go's
	// shared cache, which keeps every TLS configuration it ever saw: a
	// tenant's clients go with it (Forget, or a new credential).
	cs, err = kubernetes.NewForConfigAndClient(&rest.Config{Host: u, Timeout: c.opts.Timeout, QPS: 20, Burst: 40}, httpClient(tlsConfig, c.opts.Timeout))
	if err != nil {
		return nil, err
	}
	tc.byURL[u] = cs
	return cs, nil
}

// dialable reports whether the host of URL u takes a TCP connection
// within the timeout.
func (c *Clients) dialable(ctx context.Context, u string) error {
	parsed, err := url.Parse(u)
	if err != nil {
		return err
	}
	conn, err := (&net.Dialer{Timeout: c.opts.Timeout}).DialContext(ctx, "tcp", parsed.Host)
	if err != nil {
		return err
	}
	return conn.Close()
}

// forgetURL drops the tenant's client of a URL that did not answer, so
// that only the clients of APIs that answer are kept.
func (c *Clients) forgetURL(tc *tenantClients, u string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs, ok := tc.byURL[u]; ok {
		if rc, ok := cs.Discovery().RESTClient().(*rest.RESTClient); ok && rc.Client != nil {
			rc.Client.CloseIdleConnections()
		}
		delete(tc.byURL, u)
	}
}

// tlsConfigOf is the TLS configuration of a credential: it trusts the
// cluster's CA and presents the credential.
func tlsConfigOf(cred *talos.KubernetesCredential) (*tls.Config, error) {
	pair, err := tls.X509KeyPair(cred.Crt, cred.Key)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cred.CA) {
		return nil, errors.New("the bundle's Kubernetes CA is not PEM")
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// httpClient is an HTTP client with a transport of its own on a copy of
// tlsConfig (a transport sets its protocols in it).
func httpClient(tlsConfig *tls.Config, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig:     tlsConfig.Clone(),
		DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
		TLSHandshakeTimeout: timeout, IdleConnTimeout: 30 * time.Second, ForceAttemptHTTP2: true,
	}}
}

func nodeOf(n *corev1.Node) Node {
	out := Node{Name: n.Name, Schedulable: !n.Spec.Unschedulable, KubeletVersion: n.Status.NodeInfo.KubeletVersion}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && out.InternalIP == "" {
			out.InternalIP = a.Address
		}
	}
	for _, cond := range n.Status.Conditions {
		out.Conditions = append(out.Conditions, Condition{Type: string(cond.Type), Status: string(cond.Status), Reason: cond.Reason, Message: cond.Message,
			Since: cond.LastTransitionTime.UTC()})
		if cond.Type == corev1.NodeReady {
			out.Ready = cond.Status == corev1.ConditionTrue
		}
	}
	return out
}

// isNoAnswer tells an error of the connection (refused, timed out, TLS)
// from an answer of the API.
func isNoAnswer(err error) bool {
	var st apierrors.APIStatus
	return !errors.As(err, &st)
}

func oneLine(err error) string {
	if err == nil {
		return ""
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}
