package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	etcdstore "github.com/rezuscloud/rezuscloud/store/etcd"
)

// The engines of --store.
const (
	engineBolt = "bbolt"
	engineEtcd = "etcd"
)

// DefaultEtcdPrefix is the key prefix of the store in etcd unless
// --etcd-prefix says otherwise.
const DefaultEtcdPrefix = "/rezuscloud/"

// etcdDialTimeout bounds the first answer of etcd: a server or a copy that
// cannot reach it says so instead of waiting.
const etcdDialTimeout = 10 * time.Second

// etcdFlags say where the etcd of the store is and how to authenticate to
// it: TLS client certificates read from files, never a secret in argv.
type etcdFlags struct {
	endpoints                 []string
	caFile, certFile, keyFile string
	prefix                    string
}

func addEtcdFlags(fs *pflag.FlagSet, f *etcdFlags) {
	fs.StringSliceVar(&f.endpoints, "etcd-endpoints", nil, "`URLS` of the etcd members the store is kept in (--store etcd), comma-separated, e.g. https://10.0.0.1:2379,https://10.0.0.2:2379")
	fs.StringVar(&f.caFile, "etcd-ca-file", "", "PEM `FILE` of the CA certificates that etcd's serving certificates are checked against; default: the system's")
	fs.StringVar(&f.certFile, "etcd-cert-file", "", "PEM `FILE` of the client certificate presented to etcd, with --etcd-key-file")
	fs.StringVar(&f.keyFile, "etcd-key-file", "", "PEM `FILE` (mode 0600) of the client certificate's private key")
	fs.StringVar(&f.prefix, "etcd-prefix", DefaultEtcdPrefix, "key `PREFIX` of the store in etcd; servers on one prefix share one store, stores under different prefixes are apart")
}

// set returns the name of an etcd flag that has a value of its own, ""
// when none has.
func (f *etcdFlags) set() string {
	for _, v := range []struct{ name, value string }{
		{"etcd-endpoints", strings.Join(f.endpoints, ",")}, {"etcd-ca-file", f.caFile},
		{"etcd-cert-file", f.certFile}, {"etcd-key-file", f.keyFile},
	} {
		if v.value != "" {
			return v.name
		}
	}
	if f.prefix != DefaultEtcdPrefix {
		return "etcd-prefix"
	}
	return ""
}

// tlsConfig returns the TLS settings of the client: nil for plain http
// endpoints without certificate files. A file that does not read, or
// holds no certificate, is an error that names its flag.
func (f *etcdFlags) tlsConfig() (*tls.Config, error) {
	secure, err := f.secure()
	if err != nil || !secure {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.caFile != "" {
		pem, err := os.ReadFile(f.caFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca-file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-ca-file %s holds no PEM certificate", f.caFile)
		}
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return nil, errors.New("give --etcd-cert-file and --etcd-key-file together: the client certificate and its key")
	}
	if f.certFile != "" {
		key, err := checkPrivate("--etcd-key-file", f.keyFile)
		if err != nil {
			return nil, err
		}
		cert, err := tls.LoadX509KeyPair(f.certFile, key)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert-file %s and --etcd-key-file %s: %w", f.certFile, key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// secure says whether the endpoints speak TLS: https endpoints do, and
// certificate files need them to; a mix of http and https is refused.
func (f *etcdFlags) secure() (bool, error) {
	if len(f.endpoints) == 0 {
		return false, errors.New("no etcd endpoints: give --etcd-endpoints")
	}
	var plain, tlsURLs []string
	for _, e := range f.endpoints {
		u, err := url.Parse(e)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return false, fmt.Errorf("--etcd-endpoints: %q is not an http:// or https:// URL of an etcd member", e)
		}
		if u.Scheme == "https" {
			tlsURLs = append(tlsURLs, e)
		} else {
			plain = append(plain, e)
		}
	}
	files := f.caFile != "" || f.certFile != "" || f.keyFile != ""
	switch {
	case len(plain) > 0 && len(tlsURLs) > 0:
		return false, fmt.Errorf("--etcd-endpoints mixes http (%s) and https (%s): give every member with the same scheme", strings.Join(plain, ","), strings.Join(tlsURLs, ","))
	case len(plain) > 0 && files:
		return false, fmt.Errorf("--etcd-ca-file, --etcd-cert-file and --etcd-key-file need https endpoints, and %s is plain http", plain[0])
	}
	return len(tlsURLs) > 0, nil
}

// client connects to etcd and checks that it answers, within
// etcdDialTimeout. The caller closes it.
func (f *etcdFlags) client(ctx context.Context) (*clientv3.Client, error) {
	tlsCfg, err := f.tlsConfig()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   f.endpoints,
		TLS:         tlsCfg,
		DialTimeout: etcdDialTimeout,
		Logger:      zap.NewNop(),
		Context:     ctx,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", strings.Join(f.endpoints, ","), err)
	}
	pctx, cancel := context.WithTimeout(ctx, etcdDialTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, f.prefix, clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd at %s does not answer: %w", strings.Join(f.endpoints, ","), err)
	}
	return cli, nil
}

// checkPrefix refuses a prefix that is not a key path of its own.
func checkPrefix(prefix string) error {
	if !strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("etcd prefix %q: want a key path that starts and ends with /, such as %s", prefix, DefaultEtcdPrefix)
	}
	return nil
}

// openEtcdStore opens the store under f's prefix in etcd with cfg's
// settings, and returns it with its client, which the caller closes after
// the store. With empty, a prefix that holds any key is refused.
func openEtcdStore(ctx context.Context, f *etcdFlags, cfg etcdstore.Config, empty bool) (*etcdstore.Store, *clientv3.Client, error) {
	if err := checkPrefix(f.prefix); err != nil {
		return nil, nil, err
	}
	cli, err := f.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	where := fmt.Sprintf("etcd at %s under %s", strings.Join(f.endpoints, ","), f.prefix)
	if empty {
		err = checkEmptyPrefix(ctx, cli, f.prefix, where)
	}
	var st *etcdstore.Store
	if err == nil {
		cfg.Client, cfg.Prefix = cli, f.prefix
		if st, err = etcdstore.Open(ctx, cfg); err != nil {
			err = fmt.Errorf("open the store in %s: %w", where, err)
		}
	}
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return st, cli, nil
}

// checkEmptyPrefix refuses a prefix under which etcd holds a key.
func checkEmptyPrefix(ctx context.Context, cli *clientv3.Client, prefix, where string) error {
	ctx, cancel := context.WithTimeout(ctx, etcdDialTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", where, err)
	case resp.Count > 0:
		return fmt.Errorf("the target store is not empty (%s holds %d keys): copy into an empty one, such as a new prefix", where, resp.Count)
	}
	return nil
}

// serveStore opens the store that --store names for the server: nil for
// bbolt, which the server opens in its data dir itself, else the store in
// etcd and its client, which the caller closes once the server closed the
// store.
func serveStore(ctx context.Context, f *serveFlags, log *slog.Logger) (*etcdstore.Store, *clientv3.Client, error) {
	switch f.store {
	case engineBolt:
		if name := f.etcd.set(); name != "" {
			return nil, nil, fmt.Errorf("--%s is set, but the store is bbolt in the data dir: give --store etcd to keep it in etcd", name)
		}
		return nil, nil, nil
	case engineEtcd:
		if err := privateDir(f.data); err != nil {
			return nil, nil, err
		}
		return openEtcdStore(ctx, &f.etcd, etcdstore.Config{Logger: log.With("component", "store")}, false)
	}
	return nil, nil, fmt.Errorf("--store %q: want %s (one server, in the data dir) or %s (several servers)", f.store, engineBolt, engineEtcd)
}

// privateDir makes dir, the data dir, a dir of mode 0700 (which the bbolt
// engine does when it opens its store there): tofu's workspaces in it hold
// cluster keys while a run lasts. An existing dir that others may read is
// refused unless it is empty.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) == 0 {
		return os.Chmod(dir, 0o700)
	}
	return fmt.Errorf("data dir %s has mode %04o, and tofu's workspaces in it hold cluster keys: run chmod 700 %s", dir, fi.Mode().Perm(), dir)
}
