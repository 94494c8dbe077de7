package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/rezuscloud/rezuscloud/backup"
	"github.com/rezuscloud/rezuscloud/reconciler"
)

// backupFlags say where the tenants' etcd backups go and how they are
// encrypted. They are the server's configuration, never git's.
type backupFlags struct {
	store         string
	recipients    string
	identityFiles string
	workers       int
	timeout       time.Duration
	s3            backup.StoreOptions
}

func addBackupFlags(fs *pflag.FlagSet, f *backupFlags) {
	fs.StringVar(&f.store, "backup-store", "", "where the tenants' etcd backups go: file:///DIR, or s3://BUCKET/PREFIX (see --backup-s3-*); default: file:// under the data dir (DATA/backups)")
	fs.StringVar(&f.recipients, "backup-age-recipients", "", "age recipients (age1…, or ssh-ed25519 public keys), comma-separated, that backups are encrypted to; default: a key derived from REZUSCLOUD_STATE_PASSPHRASE. Without either, the server takes no backups")
	fs.StringVar(&f.identityFiles, "backup-age-identity-file", "", "age identity `FILES`, comma-separated, that read backups back (listings, restores) when --backup-age-recipients is given")
	fs.IntVar(&f.workers, "backup-workers", 1, "etcd backups that run at the same time, on a queue of their own")
	fs.DurationVar(&f.timeout, "backup-timeout", reconciler.DefaultBackupTimeout, "how long one etcd backup may take before it is cut off and counts as failed")
	fs.StringVar(&f.s3.S3Endpoint, "backup-s3-endpoint", "", "`HOST:PORT` of the S3-compatible service of an s3:// --backup-store (default s3.amazonaws.com)")
	fs.StringVar(&f.s3.S3Region, "backup-s3-region", "", "region of the S3 bucket")
	fs.BoolVar(&f.s3.S3PathStyle, "backup-s3-path-style", false, "address the S3 bucket in the path (https://HOST/BUCKET), not as a host name")
	fs.BoolVar(&f.s3.S3Insecure, "backup-s3-insecure", false, "talk plain HTTP to the S3 endpoint; only for a service on loopback")
	fs.StringVar(&f.s3.S3AccessKeyFile, "backup-s3-access-key-file", "", "`FILE` holding the S3 access key; or set AWS_ACCESS_KEY_ID")
	fs.StringVar(&f.s3.S3SecretKeyFile, "backup-s3-secret-key-file", "", "`FILE` holding the S3 secret key; or set AWS_SECRET_ACCESS_KEY")
}

// backupOptions opens the backup store and the keys. A server that could
// store backups only in plain text takes none, and says so; an error is a
// store or a key that is given and cannot be used.
func backupOptions(ctx context.Context, f *backupFlags, dataDir, passphrase string, log *slog.Logger) (*reconciler.BackupOptions, error) {
	var keys *backup.Keys
	var err error
	switch {
	case f.recipients != "":
		keys, err = backup.KeysFromRecipients(splitList(f.recipients), splitList(f.identityFiles))
	case passphrase != "":
		keys, err = backup.KeysFromPassphrase(passphrase)
	default:
		log.Warn("etcd backups are off: they would rest in plain text. Give --backup-age-recipients, or set REZUSCLOUD_STATE_PASSPHRASE to encrypt them with a key derived from it")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("backup keys: %w", err)
	}
	o := f.s3
	o.DataDir = dataDir
	st, err := backup.OpenStore(ctx, f.store, o)
	if err != nil {
		return nil, fmt.Errorf("--backup-store: %w", err)
	}
	if !keys.CanDecrypt() {
		log.Warn("etcd backups are written, but this server cannot read them back: listings and restores need --backup-age-identity-file")
	}
	log.Info("etcd backups", "store", st.String())
	return &reconciler.BackupOptions{Store: st, Keys: keys, Workers: f.workers, Timeout: f.timeout}, nil
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
