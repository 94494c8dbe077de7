package bolt_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
	"github.com/rezuscloud/rezuscloud/store/bolt"
)

// API objects are stored with PutObject, which stamps their metadata: a
// uid and createdAt when they are new, and updatedAt and the next
// resourceVersion of one global sequence whenever something else changed.
// Commit hooks see the changes once they are on disk; the tenant index
// answers which objects belong to a tenant.
func ExampleStore_Update() {
	dir, _ := os.MkdirTemp("", "rezuscloud-example")
	defer os.RemoveAll(dir)
	clock := func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	s, err := bolt.Open(filepath.Join(dir, "data"), &bolt.Options{Now: clock})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	s.OnCommit(func(changes []store.Change) {
		for _, c := range changes {
			fmt.Println(c.Type, c.Resource.Kind, c.Resource.Name, c.Resource.ResourceVersion)
		}
	})
	prod := &schema.Tenant{Kind: schema.KindTenant, Metadata: schema.ObjectMeta{Name: "prod", UID: "u-prod"}}
	prod.Spec.KubernetesVersion = "1.34.1"
	workers := &schema.NodeGroup{Kind: schema.KindNodeGroup, Metadata: schema.ObjectMeta{Name: "workers", UID: "u-workers",
		Labels: map[string]string{schema.LabelTenant: "prod"}}}
	s.Update(func(tx store.Tx) error {
		tx.PutObject(schema.KindTenant, "prod", prod)
		tx.PutObject(schema.KindNodeGroup, "prod/workers", workers)
		return nil
	})
	s.Update(func(tx store.Tx) error {
		changed, _ := tx.PutObject(schema.KindTenant, "prod", prod)
		fmt.Println("same object again, changed:", changed)
		prod.Spec.KubernetesVersion = "1.34.2"
		tx.PutObject(schema.KindTenant, "prod", prod)
		_, err := tx.Delete(schema.KindNodeGroup, "prod/workers")
		return err
	})
	s.View(func(tx store.Tx) error {
		return tx.TenantObjects("prod", schema.KindTenant, func(r store.Resource) error {
			fmt.Printf("%s %s rv=%d %s\n", r.Kind, r.Name, r.ResourceVersion, r.Object)
			return nil
		})
	})
	// Output:
	// ADDED Tenant prod 1
	// ADDED NodeGroup prod/workers 2
	// same object again, changed: false
	// MODIFIED Tenant prod 3
	// DELETED NodeGroup prod/workers 4
	// Tenant prod rv=3 {"apiVersion":"","kind":"Tenant","metadata":{"name":"prod","uid":"u-prod","resourceVersion":"3","createdAt":"2026-01-02T03:04:05Z","updatedAt":"2026-01-02T03:04:05Z"},"spec":{"kubernetesVersion":"1.34.2","talosVersion":"","controlPlaneEndpoint":""}}
}
