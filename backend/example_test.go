package backend_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/rezuscloud/rezuscloud/backend"
)

// Resources are JSON objects keyed by kind and name. Every change takes
// the next resourceVersion of one global sequence, and commit hooks see
// the changes once they are on disk.
func ExampleStore_Update() {
	dir, _ := os.MkdirTemp("", "rezuscloud-example")
	defer os.RemoveAll(dir)
	store, err := backend.Open(filepath.Join(dir, "data"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	store.OnCommit(func(changes []backend.Change) {
		for _, c := range changes {
			fmt.Println(c.Type, c.Resource.Kind, c.Resource.Name, c.Resource.ResourceVersion)
		}
	})
	store.Update(func(tx *backend.Tx) error {
		tx.Put("Tenant", "prod", []byte(`{"spec":{"kubernetesVersion":"1.34.1"}}`))
		tx.Put("Tenant", "dev", []byte(`{"spec":{}}`))
		return nil
	})
	store.Update(func(tx *backend.Tx) error {
		tx.Put("Tenant", "prod", []byte(`{"spec":{"kubernetesVersion":"1.34.2"}}`))
		_, err := tx.Delete("Tenant", "dev")
		return err
	})
	store.View(func(tx *backend.Tx) error {
		list, _ := tx.List("Tenant")
		for _, r := range list {
			fmt.Printf("%s %s rv=%d %s\n", r.Kind, r.Name, r.ResourceVersion, r.Object)
		}
		return nil
	})
	// Output:
	// ADDED Tenant prod 1
	// ADDED Tenant dev 2
	// MODIFIED Tenant prod 3
	// DELETED Tenant dev 4
	// Tenant prod rv=3 {"spec":{"kubernetesVersion":"1.34.2"}}
}
