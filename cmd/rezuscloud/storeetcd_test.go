package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/internal/etcdtest"
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	etcdstore "github.com/rezuscloud/rezuscloud/store/etcd"
)

// TestServeStoreEtcd: a server given --store etcd and its endpoints and
// prefix through the environment keeps its store in etcd under the
// prefix, where another store on the prefix reads what it wrote; its data
// dir holds no store file.
func TestServeStoreEtcd(t *testing.T) {
	c := etcdtest.Start(t, 1)
	data := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"REZUSCLOUD_STORE": "etcd", "REZUSCLOUD_ETCD_ENDPOINTS": strings.Join(c.Endpoints(), ","), "REZUSCLOUD_ETCD_PREFIX": "/replicas/"}
	m := NewMain(serveSettings(t, env, "--data", data, "--listen", "127.0.0.1:0"), slog.New(slog.DiscardHandler))
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, ok := m.Server.Store().(*etcdstore.Store); !ok {
		t.Fatalf("the server's store is a %T, want the etcd engine's", m.Server.Store())
	}
	err := m.Server.Store().Update(func(tx store.Tx) error {
		tenant := &schema.Tenant{}
		tenant.Metadata.Name = "alpha"
		_, err := tx.PutObject(schema.KindTenant, "alpha", tenant)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	other, err := etcdstore.Open(context.Background(), etcdstore.Config{Client: c.Client(t), Prefix: "/replicas/", CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.View(func(tx store.Tx) error {
		if _, err := tx.Get(schema.KindTenant, "alpha"); err != nil {
			t.Errorf("another store on the prefix: %v", err)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(data, "rezuscloud.db")); err == nil {
		t.Error("the data dir holds a store file too")
	}
}

// TestServeStoreSettings: an engine the server does not have, etcd
// settings beside the bbolt store, and etcd without endpoints are refused
// before anything is opened.
func TestServeStoreSettings(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--store", "sqlite"}, nil, `--store "sqlite": want bbolt (one server, in the data dir) or etcd (several servers)`},
		{[]string{"--etcd-endpoints", "http://127.0.0.1:2379"}, nil, "--etcd-endpoints is set, but the store is bbolt in the data dir: give --store etcd"},
		{nil, map[string]string{"REZUSCLOUD_ETCD_KEY_FILE": "client.key"}, "--etcd-key-file is set, but the store is bbolt"},
		{[]string{"--store", "etcd"}, nil, "no etcd endpoints: give --etcd-endpoints"},
		{[]string{"--store", "etcd", "--etcd-endpoints", "http://127.0.0.1:2379", "--etcd-prefix", "/a"}, nil, `etcd prefix "/a": want a key path that starts and ends with /`},
	} {
		data := filepath.Join(t.TempDir(), "data")
		m := NewMain(serveSettings(t, c.env, append(c.args, "--data", data, "--listen", "127.0.0.1:0")...), slog.New(slog.DiscardHandler))
		err := m.Open()
		if err == nil {
			m.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v %v: %v, want an error with %q", c.args, c.env, err, c.want)
		}
		if _, err := os.Stat(filepath.Join(data, "rezuscloud.db")); err == nil {
			t.Errorf("serve %v %v made a store in the data dir", c.args, c.env)
		}
	}
}

// writePEM writes the PEM block of typ with der to a file of mode perm in
// dir, and returns its path.
func writePEM(t *testing.T, dir, name, typ string, der []byte, perm os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEtcdTLSFiles: the client's TLS settings come from the certificate
// files, and a file that is missing, holds no certificate, or a key that
// others may read, and settings that do not fit the endpoints, are
// refused with an error that names the flag and says no more of a key
// than its path.
func TestEtcdTLSFiles(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ca := writePEM(t, dir, "ca.crt", "CERTIFICATE", der, 0o644)
	cert := writePEM(t, dir, "client.crt", "CERTIFICATE", der, 0o644)
	keyFile := writePEM(t, dir, "client.key", "EC PRIVATE KEY", keyDER, 0o600)
	openKey := writePEM(t, dir, "open.key", "EC PRIVATE KEY", keyDER, 0o644)
	notPEM := filepath.Join(dir, "ca.txt")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o644)
	https := []string{"https://127.0.0.1:2379"}

	good := etcdFlags{endpoints: https, caFile: ca, certFile: cert, keyFile: keyFile}
	cfg, err := good.tlsConfig()
	if err != nil || cfg == nil || cfg.RootCAs == nil || len(cfg.Certificates) != 1 {
		t.Fatalf("tlsConfig of good files: %+v, %v", cfg, err)
	}
	if cfg, err := (&etcdFlags{endpoints: []string{"http://127.0.0.1:2379"}}).tlsConfig(); cfg != nil || err != nil {
		t.Errorf("tlsConfig of plain http endpoints: %v, %v; want none", cfg, err)
	}
	for _, c := range []struct {
		f    etcdFlags
		want string
	}{
		{etcdFlags{endpoints: https, caFile: filepath.Join(dir, "missing.crt")}, "--etcd-ca-file: open " + filepath.Join(dir, "missing.crt")},
		{etcdFlags{endpoints: https, caFile: notPEM}, "--etcd-ca-file " + notPEM + " holds no PEM certificate"},
		{etcdFlags{endpoints: https, certFile: cert}, "give --etcd-cert-file and --etcd-key-file together"},
		{etcdFlags{endpoints: https, certFile: cert, keyFile: openKey}, "--etcd-key-file " + openKey + " has mode 0644, want 0600"},
		{etcdFlags{endpoints: https, certFile: ca, keyFile: notPEMKey(t, dir)}, "--etcd-cert-file " + ca + " and --etcd-key-file"},
		{etcdFlags{endpoints: []string{"http://127.0.0.1:2379"}, caFile: ca}, "need https endpoints, and http://127.0.0.1:2379 is plain http"},
		{etcdFlags{endpoints: []string{"http://127.0.0.1:2379", "https://127.0.0.2:2379"}}, "--etcd-endpoints mixes http (http://127.0.0.1:2379) and https (https://127.0.0.2:2379)"},
		{etcdFlags{endpoints: []string{"127.0.0.1:2379"}}, `"127.0.0.1:2379" is not an http:// or https:// URL`},
	} {
		_, err := c.f.tlsConfig()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tlsConfig %+v: %v, want an error with %q", c.f, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "PRIVATE KEY-----") {
			t.Errorf("the error shows the key: %v", err)
		}
	}
}

// notPEMKey is a private file that holds no key.
func notPEMKey(t *testing.T, dir string) string {
	path := filepath.Join(dir, "broken.key")
	if err := os.WriteFile(path, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
