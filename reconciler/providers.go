package reconciler

import (
	"github.com/rezuscloud/rezuscloud/schema"
	"github.com/rezuscloud/rezuscloud/store"
)

// putProviders records the provider modules of this build.
func (r *Reconciler) putProviders() error {
	return r.store.Update(func(tx store.Tx) error {
		for _, name := range r.modules.Names() {
			m := r.modules[name]
			p := m.Provider()
			spec := schema.ProviderSpec{Class: name, Source: p.Source, Version: p.Version, Builtin: true}
			for _, mp := range m.Mappings() {
				spec.Mappings = append(spec.Mappings, schema.TypeMapping{TFType: mp.TFType, Kind: mp.Kind})
			}
			obj := &schema.Provider{APIVersion: schema.APIVersion, Kind: schema.KindProvider,
				Metadata: schema.ObjectMeta{Name: name}, Spec: spec,
				Status: schema.ProviderStatus{Available: true}}
			if _, err := tx.PutObject(schema.KindProvider, name, obj); err != nil {
				return err
			}
		}
		return nil
	})
}
