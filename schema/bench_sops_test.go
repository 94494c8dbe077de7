package schema

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
)

// sopsFleet is genTree(n) with one more ConfigPatch a tenant, in a file of
// its own, whose patch holds a registry password: encrypted with sops for
// recipient (encrypted_regex ^patch$), or plain when recipient is "".
func sopsFleet(b *testing.B, n int, recipient string) fstest.MapFS {
	fsys := genTree(n)
	for i := range n {
		tenant := fmt.Sprintf("t%03d", i)
		doc := strings.NewReplacer("registry", "registry-"+tenant, "alpha", tenant).Replace(sopsPatch)
		data := []byte(doc)
		if recipient != "" {
			data = sopsEncrypt(b, doc, recipient, "^patch$")
		}
		fsys[tenant+"/secret.yaml"] = &fstest.MapFile{Data: data, Mode: 0o644}
	}
	return fsys
}

// BenchmarkLoadSOPS1k loads 1,000 tenants (genTree's, 11,000 documents)
// where each has one ConfigPatch whose patch is SOPS-encrypted, beside the
// same tree with that patch in plain text: the first load, into an empty
// Cache, and a load with the cache warm, which is what a commit that
// changes nothing costs. cpu-ms/op counts every core's work, which on
// shared cores says more than the wall time.
func BenchmarkLoadSOPS1k(b *testing.B) {
	ids, recipient := newAgeKey(b)
	for _, enc := range []bool{false, true} {
		name, r, opts := "plain", "", Options{}
		if enc {
			name, r, opts.Decrypt = "encrypted", recipient, ids
		}
		fsys := blobFS{sopsFleet(b, 1000, r)}
		check := func(d *Desired, err error) {
			if err != nil {
				b.Fatal(err)
			}
			p := d.Tenant("t999").Patches
			if len(d.Tenants) != 1000 || len(p) != 8 {
				b.Fatalf("%d tenants, t999's patches %d", len(d.Tenants), len(p))
			}
			for _, cp := range p {
				if cp.Metadata.Name == "registry-t999" && (len(cp.Source.Encrypted) == 1) != enc {
					b.Fatalf("the patch's encrypted values: %q", cp.Source.Encrypted)
				}
			}
		}
		b.Run(name+"/first", func(b *testing.B) {
			start := cpuTime()
			for b.Loop() {
				o := opts
				o.Cache = NewCache(0)
				check(Load(fsys, ".", &o))
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e6, "cpu-ms/op")
		})
		b.Run(name+"/warm", func(b *testing.B) {
			o := opts
			o.Cache = NewCache(0)
			check(Load(fsys, ".", &o))
			start := cpuTime()
			for b.Loop() {
				check(Load(fsys, ".", &o))
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}
