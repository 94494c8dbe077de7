package tofu

import "testing"

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"exit status 1\n\nError: Error creating OpenStack server: got 500\n\n  with openstack_compute_instance_v2.ng_workers[1],\n  on main.tf.json line 111, in resource.x:\n 111: }\n\nError: second\n":                                  "exit status 1: Error creating OpenStack server: got 500 (with openstack_compute_instance_v2.ng_workers[1]); second",
		"exit status 1\n\nError: Cannot open machine directory\n\n  with provider[\"rezuscloud.io/rezuscloud/rezussim\"],\n  on main.tf.json line 3, in provider.rezussim:\n   3: {\n\nopen machine store: not a directory\nsecond line\n": "exit status 1: Cannot open machine directory (with provider[\"rezuscloud.io/rezuscloud/rezussim\"]): open machine store: not a directory second line",
		"exit status 1\nsomething\n  broke\n": "exit status 1: something; broke",
		"plain":                               "plain",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}
