package talosnode

import (
	"bytes"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/siderolabs/crypto/x509"
)

// tlsConfigFor picks the TLS configuration of the node a connection
// reached, by the connection's local address: the maintenance server's
// self-signed certificate, or mTLS with a certificate issued from the
// running config's machine.ca.
func (h *Host) tlsConfigFor(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	addr, ok := addrOf(hello.Conn.LocalAddr())
	if !ok {
		return nil, errors.New("no local address")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.byAddr[addr]
	if n == nil {
		return nil, fmt.Errorf("no node at %s", addr)
	}
	h.advance(n, h.now())
	if n.st.Running == nil {
		return h.maintenanceTLS(n)
	}
	return h.nodeTLS(n)
}

// maintenanceTLS is the maintenance server's: a self-signed CA issues a
// certificate for the node's address (and 127.0.0.1, ::1), and no client
// certificate is asked for.
func (h *Host) maintenanceTLS(n *node) (*tls.Config, error) {
	if n.maintTLS != nil {
		return n.maintTLS, nil
	}
	ca, err := x509.NewSelfSignedCertificateAuthority(x509.ECDSA(false))
	if err != nil {
		return nil, fmt.Errorf("maintenance CA: %w", err)
	}
	kp, err := x509.NewKeyPair(ca,
		x509.IPAddresses([]net.IP{n.addr.AsSlice(), net.IPv4(127, 0, 0, 1), net.IPv6loopback}),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
		x509.NotAfter(h.now().Add(24*time.Hour)),
	)
	if err != nil {
		return nil, fmt.Errorf("maintenance certificate: %w", err)
	}
	n.maintTLS = &tls.Config{
		Certificates: []tls.Certificate{*kp.Certificate},
		NextProtos:   []string{"h2"},
		MinVersion:   tls.VersionTLS12,
	}
	return n.maintTLS, nil
}

// nodeTLS is apid's: a server certificate with the node's address as IP
// SAN (plus machine.certSANs), issued from machine.ca, and client
// certificates required to chain to machine.ca or an accepted CA. A control
// plane holds the CA key in its config; a worker gets its certificate from
// trustd on a control plane of its cluster (same CA and token), and has
// none until one is known.
func (h *Host) nodeTLS(n *node) (*tls.Config, error) {
	run := n.st.Running
	if n.tls != nil && n.tlsFor == run.Hash {
		return n.tls, nil
	}
	ca, err := h.issuer(run.Summary)
	if err != nil {
		return nil, err
	}
	ips := []net.IP{n.addr.AsSlice()}
	var dns []string
	for _, san := range run.Summary.CertSANs {
		if ip := net.ParseIP(san); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, san)
		}
	}
	now := h.now()
	kp, err := x509.NewKeyPair(ca,
		x509.CommonName(n.hostname()),
		x509.IPAddresses(ips), x509.DNSNames(dns),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
		x509.NotBefore(now.Add(-time.Hour)), x509.NotAfter(now.Add(365*24*time.Hour)),
	)
	if err != nil {
		return nil, fmt.Errorf("apid certificate: %w", err)
	}
	pool, err := h.clientCAs(n, run.Summary)
	if err != nil {
		return nil, err
	}
	cert := *kp.Certificate
	// The one certificate needs no parsed form for a handshake: a node
	// keeps only its DER and key.
	cert.Leaf = nil
	n.tls = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		NextProtos:   []string{"h2"},
		MinVersion:   tls.VersionTLS12,
	}
	n.tlsFor = run.Hash
	return n.tls, nil
}

// clientCAs returns the pool of CAs that client certificates of n must
// chain to: the one another node of the cluster made from the same CAs,
// else a new one, so that a cluster's nodes share one. Called with h.mu
// held.
func (h *Host) clientCAs(n *node, s summary) (*stdx509.CertPool, error) {
	cas := append([][]byte{s.CA}, s.AcceptedCAs...)
	for m := range h.clusters[s.Cluster] {
		if m != n && m.tls != nil && slices.EqualFunc(m.tlsCAs, cas, bytes.Equal) {
			n.tlsCAs = m.tlsCAs
			return m.tls.ClientCAs, nil
		}
	}
	pool := stdx509.NewCertPool()
	for _, c := range cas {
		if !pool.AppendCertsFromPEM(c) {
			return nil, errors.New("machine.ca: no PEM certificate")
		}
	}
	n.tlsCAs = cas
	return pool, nil
}

// issuer returns the CA that signs a node's API certificate. Called with
// h.mu held.
func (h *Host) issuer(s summary) (*x509.CertificateAuthority, error) {
	key := s.CAKey
	if len(key) == 0 {
		key = h.trustd[s.Cluster+"\x00"+s.Token+"\x00"+hashHex(s.CA)]
	}
	if len(key) == 0 {
		return nil, errors.New("apid: no certificate yet: no trustd of this cluster (a control plane with the same machine.ca and machine.token) is known")
	}
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(&x509.PEMEncodedCertificateAndKey{Crt: s.CA, Key: key})
	if err != nil {
		return nil, fmt.Errorf("machine.ca: %w", err)
	}
	return ca, nil
}

// addrOf returns the IP address of a TCP address.
func addrOf(a net.Addr) (netip.Addr, bool) {
	t, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	ip, ok := netip.AddrFromSlice(t.IP)
	return ip.Unmap(), ok
}

// MaintenanceFingerprint returns the SPKI fingerprint of the maintenance
// server's certificate of a node in maintenance mode (by id, name, host
// name or address), which a client may pin (x509.MatchSPKIFingerprints).
// As on Talos, the certificate is new at every boot of the host.
func (h *Host) MaintenanceFingerprint(key string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.lookup(key)
	if n == nil {
		return "", fmt.Errorf("no machine %q", key)
	}
	cfg, err := h.maintenanceTLS(n)
	if err != nil {
		return "", err
	}
	fp, err := x509.SPKIFingerprintFromDER(cfg.Certificates[0].Certificate[0])
	if err != nil {
		return "", err
	}
	return fp.String(), nil
}
