package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rezuscloud/rezuscloud/backend"
	"github.com/rezuscloud/rezuscloud/backend/api"
)

// hbTerraform is the second, independent client of the state backend.
const hbTerraform = "/usr/local/bin/terraform"

// terraform runs the terraform binary in w and returns stdout, stderr and
// the exit code.
func (w *tfsWork) terraform(args ...string) (string, string, int) {
	w.s.t.Helper()
	if _, err := os.Stat(hbTerraform); err != nil {
		w.s.t.Skipf("no terraform at %s: %v", hbTerraform, err)
	}
	cmd := exec.Command(hbTerraform, args...)
	cmd.Dir, cmd.Env = w.dir, w.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		w.s.t.Fatalf("terraform %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), code
}

func (w *tfsWork) mustTerraform(args ...string) string {
	w.s.t.Helper()
	out, errOut, code := w.terraform(args...)
	if code != 0 {
		w.s.t.Fatalf("terraform %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// versionsAs lists the versions of a state as token.
func (s *tfsServer) versionsAs(name, token string) (int, api.StateVersionList) {
	s.t.Helper()
	code, body := s.request("GET", "/api/v1/tfstate/"+name+"/versions", token, nil)
	var list api.StateVersionList
	if code == http.StatusOK {
		if err := json.Unmarshal(body, &list); err != nil {
			s.t.Fatalf("versions of %s: %v: %s", name, err, body)
		}
	}
	return code, list
}

// TestHardeningStateViewRole: the view role sees what a state is (serials,
// lineage, versions, the lock and its holder) but never its bytes, neither
// by GET nor through tofu; edit reads it, and with encryption what edit
// reads is ciphertext.
func TestHardeningStateViewRole(t *testing.T) {
	s := tfsStart(t, backend.Config{})
	const marker = "view-must-not-read-this-7d1e"
	w := s.work("tenant", "alice", tfsDataTF(map[string]string{"ca_key": marker}, 0))
	w.must("apply", "-auto-approve", "-input=false", "-no-color")

	code, body := s.request("GET", "/tfstate/tenant", "dash", nil)
	if code != http.StatusForbidden || bytes.Contains(body, []byte(marker)) {
		t.Fatalf("GET /tfstate/tenant as view: %d %s, want 403 without the state", code, body)
	}
	if code, body := s.request("GET", "/tfstate/tenant?version=1", "dash", nil); code != http.StatusForbidden {
		t.Fatalf("GET of an earlier version as view: %d %s, want 403", code, body)
	}
	if code, body := s.request("GET", "/tfstate/tenant?version=1", "alice", nil); code != http.StatusForbidden {
		t.Fatalf("GET of an earlier version as edit: %d %s, want 403 (admin only)", code, body)
	}
	if code, body := s.request("GET", "/tfstate/tenant", "alice", nil); code != http.StatusOK || !bytes.Contains(body, []byte(marker)) {
		t.Fatalf("GET /tfstate/tenant as edit: %d, want 200 with the state", code)
	}
	// tofu with a view token cannot read the state either.
	wv := s.newWork("tenant", "dash", tfsDataTF(map[string]string{"ca_key": marker}, 0))
	out, errOut, code := wv.run("init", "-input=false", "-no-color")
	if code == 0 || strings.Contains(out+errOut, marker) {
		t.Fatalf("tofu init with a view token: exit %d, want a refusal\n%s\n%s", code, out, errOut)
	}
	t.Logf("tofu init with a view token, refused:\n%s", errOut)

	// The metadata is the view role's: versions with serial and lineage,
	// and the lock with its holder while a run holds it.
	st := s.state("tenant")
	code, list := s.versionsAs("tenant", "dash")
	if code != http.StatusOK || list.Total != 1 || list.Items[0].Lineage != st.Lineage || *list.Items[0].Serial != st.Serial {
		t.Fatalf("versions as view: %d %+v, want serial %d lineage %s", code, list, st.Serial, st.Lineage)
	}
	os.WriteFile(filepath.Join(w.dir, "main.tf.json"), []byte(tfsDataTF(map[string]string{"ca_key": marker, "b": "x"}, 3)), 0o600)
	apply := w.cmd("apply", "-auto-approve", "-input=false", "-no-color")
	if err := apply.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for list.Lock == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		_, list = s.versionsAs("tenant", "dash")
	}
	if list.Lock == nil || list.Lock.Token != "alice" || list.Lock.ID == "" {
		t.Errorf("the view role does not see the lock and its holder: %+v", list.Lock)
	}
	if err := apply.Wait(); err != nil {
		t.Fatalf("apply: %v", err)
	}

	// Encrypted: edit reads what tofu stored, ciphertext.
	we := s.work("encrypted", "alice", tfsDataTF(map[string]string{"ca_key": marker}, 0), "TF_ENCRYPTION="+tfsEncryption)
	we.must("apply", "-auto-approve", "-input=false", "-no-color")
	code, body = s.request("GET", "/tfstate/encrypted", "alice", nil)
	if code != http.StatusOK || bytes.Contains(body, []byte(marker)) || !bytes.Contains(body, []byte(`"encrypted_data"`)) {
		t.Fatalf("GET of an encrypted state as edit: %d %.200s, want ciphertext", code, body)
	}
	if code, list := s.versionsAs("encrypted", "dash"); code != http.StatusOK || list.Items[0].Lineage == "" || list.Items[0].Serial == nil {
		t.Fatalf("versions of an encrypted state as view: %d %+v, want serial and lineage", code, list)
	}
}

// TestHardeningStateGarbage: a POST that is not a TF state is refused with
// 400 and a reason, and nothing stored changes, so that tofu and terraform
// go on working on their states and a foreign lineage stays out.
func TestHardeningStateGarbage(t *testing.T) {
	s := tfsStart(t, backend.Config{})
	wt := s.work("tofu-state", "alice", tfsDataTF(map[string]string{"a": "one"}, 0))
	wt.must("apply", "-auto-approve", "-input=false", "-no-color")
	wf := s.newWork("terraform-state", "bob", tfsDataTF(map[string]string{"a": "one"}, 0))
	wf.mustTerraform("init", "-input=false", "-no-color")
	wf.mustTerraform("apply", "-auto-approve", "-input=false", "-no-color")

	garbage := map[string][]byte{
		"text":                     []byte("this is not a state"),
		"binary":                   {0x00, 0xff, '{', 0x80},
		"truncated JSON":           []byte(`{"version":4,"serial":99,"lineage":"x"`),
		"a JSON array":             []byte(`[1,2,3]`),
		"an empty object":          []byte(`{}`),
		"a state without lineage":  []byte(`{"version":4,"terraform_version":"1.10.10","serial":99,"outputs":{},"resources":[]}`),
		"an envelope without data": []byte(`{"serial":99,"lineage":"x","encryption_version":"v0"}`),
	}
	for _, name := range []string{"tofu-state", "terraform-state", "fresh"} {
		token := "alice"
		if name == "terraform-state" {
			token = "bob"
		}
		code, before := s.versionsAs(name, "dash")
		var cur []byte
		if name != "fresh" {
			if code != http.StatusOK || len(before.Items) == 0 {
				t.Fatalf("versions of %s as view: %d, want its versions", name, code)
			}
			_, cur = s.request("GET", "/tfstate/"+name, token, nil)
		}
		for what, body := range garbage {
			code, resp := s.request("POST", "/tfstate/"+name, token, body)
			if code != http.StatusBadRequest || !strings.Contains(string(resp), "not a TF state, nothing stored") {
				t.Errorf("POST of %s to %s: %d %s, want 400", what, name, code, resp)
			}
		}
		code, after := s.versionsAs(name, "dash")
		if name == "fresh" {
			if code != http.StatusNotFound {
				t.Errorf("%s: versions after refused POSTs: %d, want 404 (nothing stored)", name, code)
			}
			continue
		}
		if after.Total != before.Total {
			t.Errorf("%s: %d versions after refused POSTs, %d before", name, after.Total, before.Total)
		}
		if _, now := s.request("GET", "/tfstate/"+name, token, nil); !bytes.Equal(now, cur) {
			t.Errorf("%s: the state changed under refused POSTs", name)
		}
		foreign := fmt.Appendf(nil, `{"version":4,"terraform_version":"1.10.10","serial":%d,"lineage":"foreign-lineage","outputs":{},"resources":[]}`, *before.Items[0].Serial+10)
		if code, resp := s.request("POST", "/tfstate/"+name, token, foreign); code != http.StatusConflict {
			t.Errorf("%s: POST of a foreign lineage: %d %s, want 409", name, code, resp)
		}
	}
	// Both clients find their state as they left it.
	if _, _, code := wt.run("plan", "-detailed-exitcode", "-input=false", "-no-color"); code != 0 {
		t.Errorf("tofu plan after the refused POSTs: exit %d, want 0 (no changes)", code)
	}
	if out, errOut, code := wf.terraform("plan", "-detailed-exitcode", "-input=false", "-no-color"); code != 0 {
		t.Errorf("terraform plan after the refused POSTs: exit %d, want 0 (no changes)\n%s\n%s", code, out, errOut)
	}
}

// TestHardeningTerraformForceUnlock: terraform's force-unlock sends an
// empty UNLOCK body whatever lock ID it is given. Without the ID, only an
// admin may release a lock, even the holder's own token may not, and the
// server logs who forced it and whose lock it was.
func TestHardeningTerraformForceUnlock(t *testing.T) {
	s := tfsStart(t, backend.Config{})
	w := s.newWork("stuck-tf", "alice", tfsDataTF(map[string]string{"a": "x"}, 30))
	w.mustTerraform("init", "-input=false", "-no-color")

	// alice's terraform dies holding the lock.
	cmd := exec.Command(hbTerraform, "apply", "-auto-approve", "-input=false", "-no-color")
	cmd.Dir, cmd.Env = w.dir, w.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lock := s.waitLock("stuck-tf", 30*time.Second)
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
	if lock.Token != "alice" {
		t.Fatalf("lock holder %+v, want alice", lock)
	}

	// alice herself, with a wrong ID: terraform sends no ID at all.
	_, errOut, code := w.terraform("force-unlock", "-force", "-no-color", "not-the-lock-id")
	if code == 0 {
		t.Fatalf("terraform force-unlock with a wrong ID by the holder's own edit token succeeded:\n%s", errOut)
	}
	t.Logf("alice's force-unlock with a wrong ID, refused:\n%s", errOut)
	if l := s.waitLock("stuck-tf", time.Second); l.ID != lock.ID {
		t.Fatalf("lock after a refused force-unlock: %+v, want %s", l, lock.ID)
	}
	wb := s.newWork("stuck-tf", "bob", tfsDataTF(map[string]string{"a": "x"}, 0))
	wb.mustTerraform("init", "-input=false", "-no-color")
	if _, errOut, code := wb.terraform("force-unlock", "-force", "-no-color", lock.ID); code == 0 {
		t.Fatalf("terraform force-unlock by another edit token succeeded:\n%s", errOut)
	}

	wo := s.newWork("stuck-tf", "ops", tfsDataTF(map[string]string{"a": "x"}, 0))
	wo.mustTerraform("init", "-input=false", "-no-color")
	out := wo.mustTerraform("force-unlock", "-force", "-no-color", "any-id-at-all")
	if !strings.Contains(out, "successfully unlocked") {
		t.Errorf("admin force-unlock printed:\n%s", out)
	}
	logs := s.logs.String()
	want := `level=WARN msg="state force-unlocked" state=stuck-tf lock=` + lock.ID + ` holder=alice`
	if !strings.Contains(logs, want) || !strings.Contains(logs, "by=ops by_role=admin lock_id_given=false") {
		t.Errorf("the force-unlock is not logged with holder and who (%s):\n%s", want, logs)
	}
	if code, list := s.versionsAs("stuck-tf", "dash"); code != http.StatusNotFound || list.Lock != nil {
		t.Fatalf("after the admin's force-unlock: versions %d %+v, want no lock and no state", code, list)
	}
	// The state is usable again.
	os.WriteFile(filepath.Join(w.dir, "main.tf.json"), []byte(tfsDataTF(map[string]string{"a": "x"}, 0)), 0o600)
	w.mustTerraform("apply", "-auto-approve", "-input=false", "-no-color")
}
