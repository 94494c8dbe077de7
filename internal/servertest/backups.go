package servertest

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// Backups is a backend.Backups over backups held in memory, for the tests
// of the API's clients (the client, rezusctl, the dashboard), which need a
// server with a backup store but not the store itself: Add gives what the
// listing serves, RequestBackup records who asked, and DownloadBackup
// writes a tar of the backup's objects, each holding Object(tenant, id,
// name). An unknown backup is store.ErrNotFound.
type Backups struct {
	// OnRequest, when set, is called with each request RequestBackup
	// takes, as the backup worker would start one.
	OnRequest func(tenant, by string)

	mu        sync.Mutex
	backups   map[string][]schema.BackupInfo
	requested []string
}

// BackupObjects are the objects of a backup, as its download holds them.
var BackupObjects = []string{"manifest.age", "snapshot.age", "state.age"}

// Object is the content of a backup's object in a download.
func Object(tenant, id, name string) string {
	return "age-encryption.org/v1\n-> X25519 " + tenant + "/" + id + "/" + name + "\n"
}

// Add makes b list the backups, after those it has.
func (b *Backups) Add(list ...schema.BackupInfo) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.backups == nil {
		b.backups = map[string][]schema.BackupInfo{}
	}
	for _, i := range list {
		b.backups[i.Tenant] = append(b.backups[i.Tenant], i)
	}
}

// Requested returns the requests RequestBackup took, "TENANT by WHO".
func (b *Backups) Requested() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.requested)
}

func (b *Backups) ListBackups(_ context.Context, tenant string) ([]schema.BackupInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.backups[tenant]), nil
}

func (b *Backups) RequestBackup(_ context.Context, tenant, by string) error {
	b.mu.Lock()
	b.requested = append(b.requested, tenant+" by "+by)
	b.mu.Unlock()
	if b.OnRequest != nil {
		b.OnRequest(tenant, by)
	}
	return nil
}

func (b *Backups) DownloadBackup(_ context.Context, tenant, id string, w io.Writer) error {
	b.mu.Lock()
	found := slices.ContainsFunc(b.backups[tenant], func(i schema.BackupInfo) bool { return i.ID == id })
	b.mu.Unlock()
	if !found {
		return fmt.Errorf("backup %s of tenant %s: %w", id, tenant, store.ErrNotFound)
	}
	tw := tar.NewWriter(w)
	for _, name := range BackupObjects {
		body := Object(tenant, id, name)
		if err := tw.WriteHeader(&tar.Header{Name: tenant + "/" + id + "/" + name, Mode: 0o600, Size: int64(len(body))}); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, body); err != nil {
			return err
		}
	}
	return tw.Close()
}
