package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func sampleRecord() Record {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	return Record{
		ID: "sim-0123456789abcdef", Name: "w-0", Tenant: "acme", NodeGroup: "workers",
		Role: "worker", Shape: "small", Image: "talos-v1.12.6", Address: "127.42.0.7",
		Hostname: "acme-workers-abcdef", UserDataSHA256: HashUserData([]byte("secret")),
		CreatedAt: t0, UpdatedAt: t0,
	}
}

func TestRecordFormat(t *testing.T) {
	r := sampleRecord()
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "id": "sim-0123456789abcdef",
  "name": "w-0",
  "tenant": "acme",
  "nodeGroup": "workers",
  "role": "worker",
  "shape": "small",
  "image": "talos-v1.12.6",
  "address": "127.42.0.7",
  "hostname": "acme-workers-abcdef",
  "userDataSHA256": "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b",
  "createdAt": "2025-01-02T03:04:05Z",
  "updatedAt": "2025-01-02T03:04:05Z"
}
`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Fatalf("record JSON (-want +got):\n%s", diff)
	}
	back, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, back); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
}

func TestUnmarshalRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*Record)
		want string
	}{
		"bad id":         {func(r *Record) { r.ID = "../etc/passwd" }, `id "../etc/passwd"`},
		"bad tenant":     {func(r *Record) { r.Tenant = "Acme_1" }, `tenant "Acme_1" is not a DNS label`},
		"bad name":       {func(r *Record) { r.Name = "w_0" }, `name "w_0" is not a DNS subdomain`},
		"bad role":       {func(r *Record) { r.Role = "master" }, `role "master"`},
		"no image":       {func(r *Record) { r.Image = "" }, "image is empty"},
		"foreign addr":   {func(r *Record) { r.Address = "10.1.2.3" }, "address 10.1.2.3 is not a simulated machine's address"},
		"127.0.0.1":      {func(r *Record) { r.Address = "127.0.0.1" }, "address 127.0.0.1 is not"},
		"garbage addr":   {func(r *Record) { r.Address = "x" }, "address:"},
		"clear userdata": {func(r *Record) { r.UserDataSHA256 = "secret" }, `userDataSHA256 "secret"`},
		"no createdAt":   {func(r *Record) { r.CreatedAt = time.Time{} }, "createdAt is missing"},
	} {
		t.Run(name, func(t *testing.T) {
			r := sampleRecord()
			tc.edit(&r)
			b, err := r.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			_, err = Unmarshal(b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := Unmarshal([]byte(`{"id": 5`)); err == nil {
		t.Fatal("truncated JSON accepted")
	}
}

func TestHostname(t *testing.T) {
	id := "sim-0123456789abcdef"
	if got := Hostname("acme", "workers", id); got != "acme-workers-abcdef" {
		t.Fatalf("got %q", got)
	}
	long := strings.Repeat("a", 40)
	got := Hostname(long, "b-"+long, id)
	if len(got) > 63 || !strings.HasSuffix(got, "-abcdef") || CheckLabel("hostname", got) != nil {
		t.Fatalf("long names: got %q (%d bytes)", got, len(got))
	}
	// A cut that would leave a trailing '-' before the suffix drops it.
	got = Hostname(strings.Repeat("a", 55), "b", id)
	if strings.Contains(got, "--") || CheckLabel("hostname", got) != nil {
		t.Fatalf("cut at '-': got %q", got)
	}
}
