package backup_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/rezuscloud/rezuscloud/backup"
)

// A backup written into a directory, listed and read back for a restore.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "backups")
	defer os.RemoveAll(dir)

	// The operator's age key: the server encrypts to its recipient and
	// reads back with its identity file.
	id, _ := age.GenerateX25519Identity()
	idFile := filepath.Join(dir, "backup-key.txt")
	os.WriteFile(idFile, []byte(id.String()+"\n"), 0o600)
	keys, err := backup.KeysFromRecipients([]string{id.Recipient().String()}, []string{idFile})
	if err != nil {
		panic(err)
	}
	st, err := backup.OpenStore(ctx, "file://"+filepath.Join(dir, "store"), backup.StoreOptions{})
	if err != nil {
		panic(err)
	}

	m := backup.Manifest{Tenant: "prod", Time: time.Date(2026, 12, 5, 8, 30, 0, 0, time.UTC), Machine: "cp-1", Reason: "schedule"}
	snapshot := strings.NewReader("the etcd snapshot, streamed from a control plane")
	if _, err := backup.Write(ctx, st, keys, m, snapshot, []byte(`{"version":4}`)); err != nil {
		panic(err)
	}

	list, _ := backup.List(ctx, st, keys, "prod")
	b, err := backup.Open(ctx, st, keys, "prod", list[0].ID) // verified: decrypts, hashes match, prod's
	if err != nil {
		panic(err)
	}
	state, _ := b.State(ctx)
	rc, _ := b.Snapshot(ctx)
	data, _ := io.ReadAll(rc)
	rc.Close()
	fmt.Println(len(list), list[0].Time.Format(time.RFC3339), list[0].Machine)
	fmt.Println(string(state))
	fmt.Println(bytes.HasPrefix(data, []byte("the etcd snapshot")))
	// Output:
	// 1 2026-12-05T08:30:00Z cp-1
	// {"version":4}
	// true
}
