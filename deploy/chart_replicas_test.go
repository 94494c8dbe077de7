package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// ownEtcd runs three replicas on the chart's own etcd.
var ownEtcd = map[string]any{
	"replicas": 3,
	"etcd":     map[string]any{"enabled": true, "serverSecret": "rezus-etcd-server", "clientSecret": "rezus-etcd-client"},
}

// TestChartOneServer: by default the one server keeps bbolt, on its
// Deployment, with no replica or etcd object beside it.
func TestChartOneServer(t *testing.T) {
	r := render(t, nil)
	if len(r.sets) != 0 || len(r.budgets) != 0 || len(r.services) != 1 {
		t.Errorf("one server on bbolt renders StatefulSets %v, budgets %v, services %v", keys(r.sets), keys(r.budgets), keys(r.services))
	}
	for _, a := range server(t, r.deploy.Spec.Template.Spec).Args {
		if strings.HasPrefix(a, "--store") || strings.HasPrefix(a, "--etcd") || strings.HasPrefix(a, "--state-url") {
			t.Errorf("one server on bbolt has %s", a)
		}
	}
}

func TestChartReplicasOwnEtcd(t *testing.T) {
	r := render(t, ownEtcd)
	if r.deploy != nil || r.pvc != nil {
		t.Errorf("replicas on etcd render a Deployment (%v) or the one server's claim (%v)", r.deploy != nil, r.pvc != nil)
	}
	set := r.sets[fullname]
	if set == nil {
		t.Fatalf("no StatefulSet %s of the replicas: %v", fullname, keys(r.sets))
	}
	if set.Spec.Replicas == nil || *set.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", set.Spec.Replicas)
	}
	pod := set.Spec.Template.Spec
	c := server(t, pod)
	checkProbes(t, c)
	checkSecurity(t, pod, c)
	checkServeFlags(t, "replica args", c.Args)
	checkEnv(t, "replica env", envOf(c))
	checkReplicaData(t, set, c)
	checkReplicaNames(t, r, set, c)

	etcd := r.sets[fullname+"-etcd"]
	if etcd == nil {
		t.Fatalf("no StatefulSet %s-etcd with etcd.enabled: %v", fullname, keys(r.sets))
	}
	members := checkEtcdMembers(t, r, etcd)
	if got := strings.Split(flagValue(t, c.Args, "etcd-endpoints"), ","); !slices.Equal(got, members) {
		t.Errorf("--etcd-endpoints %v, want the members' client URLs %v", got, members)
	}
	checkEtcdClient(t, pod, c, "rezus-etcd-client")
	checkLabelsApart(t, r, set, etcd)
}

func TestChartReplicasExistingEtcd(t *testing.T) {
	endpoints := []any{"https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379"}
	r := render(t, map[string]any{
		"replicas": 2,
		"leaseTTL": "5s",
		"etcd":     map[string]any{"endpoints": endpoints, "prefix": "/fleet/", "clientSecret": "etcd-client"},
	})
	if len(r.sets) != 1 || len(r.budgets) != 0 {
		t.Errorf("an existing etcd renders StatefulSets %v and budgets %v, want the replicas' alone", keys(r.sets), keys(r.budgets))
	}
	set := r.sets[fullname]
	if set == nil || set.Spec.Replicas == nil || *set.Spec.Replicas != 2 {
		t.Fatalf("StatefulSet %s %+v, want 2 replicas", fullname, set)
	}
	c := server(t, set.Spec.Template.Spec)
	checkServeFlags(t, "replica args", c.Args)
	for flag, want := range map[string]string{
		"etcd-endpoints": "https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379",
		"etcd-prefix":    "/fleet/",
		"lease-ttl":      "5s",
		"store":          "etcd",
	} {
		if got := flagValue(t, c.Args, flag); got != want {
			t.Errorf("--%s=%s, want %s", flag, got, want)
		}
	}
	checkEtcdClient(t, set.Spec.Template.Spec, c, "etcd-client")
	checkReplicaNames(t, r, set, c)
}

// TestChartRefuses: settings that cannot work are refused by name before
// anything is installed.
func TestChartRefuses(t *testing.T) {
	existing := map[string]any{"endpoints": []any{"https://10.0.0.1:2379"}}
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"replicas on bbolt", map[string]any{"replicas": 2}, "replicas: 2 needs the store in etcd"},
		{"no replica", map[string]any{"replicas": 0}, "replicas: 0: want 1 or more"},
		{"two etcds", map[string]any{"etcd": map[string]any{"enabled": true, "endpoints": existing["endpoints"], "serverSecret": "s", "clientSecret": "c"}}, "set one of them"},
		{"own etcd without certificates", map[string]any{"etcd": map[string]any{"enabled": true}}, "etcd.enabled needs etcd.serverSecret"},
		{"own etcd of 4", map[string]any{"etcd": map[string]any{"enabled": true, "members": 4, "serverSecret": "s", "clientSecret": "c"}}, "etcd.members: 4: want 3 or 5"},
		{"one claim for replicas", map[string]any{"etcd": existing, "persistence": map[string]any{"existingClaim": "old"}}, "persistence.existingClaim is one volume"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := renderFiles(tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// checkReplicaData: each replica has a claim of its own for the data dir.
func checkReplicaData(t *testing.T, set *appsv1.StatefulSet, c corev1.Container) {
	t.Helper()
	if set.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("pod management %q, want Parallel: replicas need no order", set.Spec.PodManagementPolicy)
	}
	for _, v := range set.Spec.Template.Spec.Volumes {
		if v.Name == "data" {
			t.Errorf("volume data %+v in the pod: replicas would share one data dir", v.VolumeSource)
		}
	}
	if len(set.Spec.VolumeClaimTemplates) != 1 || set.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Fatalf("claim templates %+v, want data", set.Spec.VolumeClaimTemplates)
	}
	if got := set.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String(); got != "10Gi" {
		t.Errorf("data claim of %s, want persistence.size 10Gi", got)
	}
	if m := mount(t, c, "data"); m.MountPath != "/var/lib/rezuscloud" {
		t.Errorf("data mounted at %s, want the image's volume /var/lib/rezuscloud", m.MountPath)
	}
}

// checkReplicaNames: a replica is named after its pod, advertises its pod
// DNS name, and reaches the state backend through the chart's Service.
func checkReplicaNames(t *testing.T, r rendered, set *appsv1.StatefulSet, c corev1.Container) {
	t.Helper()
	var name *corev1.EnvVar
	for i, e := range c.Env {
		if e.Name == "REZUSCLOUD_REPLICA_NAME" {
			name = &c.Env[i]
		}
	}
	if name == nil || name.ValueFrom == nil || name.ValueFrom.FieldRef == nil || name.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("REZUSCLOUD_REPLICA_NAME %+v, want the pod's name", name)
	}
	headless := checkHeadless(t, r, set.Spec.ServiceName)
	if !selects(headless.Spec.Selector, set.Spec.Template.Labels) {
		t.Errorf("Service %s selects %v, not the replicas %v", headless.Name, headless.Spec.Selector, set.Spec.Template.Labels)
	}
	want := fmt.Sprintf("http://$(REZUSCLOUD_REPLICA_NAME).%s.infra.svc:%d", headless.Name, port(t, c, "http"))
	if got := flagValue(t, c.Args, "advertise-url"); got != want {
		t.Errorf("--advertise-url=%s, want the pod's DNS name %s", got, want)
	}
	want = fmt.Sprintf("http://%s.infra.svc:%d", r.service.Name, r.service.Spec.Ports[0].Port)
	if got := flagValue(t, c.Args, "state-url"); got != want {
		t.Errorf("--state-url=%s, want the chart's Service %s", got, want)
	}
	if r.service.Spec.ClusterIP == corev1.ClusterIPNone || !selects(r.service.Spec.Selector, set.Spec.Template.Labels) {
		t.Errorf("Service %s %+v does not balance over the replicas", r.service.Name, r.service.Spec)
	}
}

// checkEtcdMembers checks the chart's etcd: its members find each other by
// their pod DNS names, speak mutual TLS, keep a quorum through a drain,
// and run as the server does. It returns the members' client URLs.
func checkEtcdMembers(t *testing.T, r rendered, etcd *appsv1.StatefulSet) []string {
	t.Helper()
	n := int(*etcd.Spec.Replicas)
	if n != 3 || etcd.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("etcd of %d members, policy %q, want 3 started in parallel", n, etcd.Spec.PodManagementPolicy)
	}
	svc := checkHeadless(t, r, etcd.Spec.ServiceName)
	pod := etcd.Spec.Template.Spec
	c := pod.Containers[0]
	checkPodSecurity(t, pod)
	checkContainerSecurity(t, c)
	if len(c.Env) != 1 || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Fatalf("etcd env %+v, want the pod's name", c.Env)
	}
	checkEtcdFlags(t, c.Args)
	var peers, clients []string
	for i := range n {
		member := fmt.Sprintf("%s-%d", etcd.Name, i)
		args := strings.ReplaceAll(strings.Join(c.Args, "\n"), "$("+c.Env[0].Name+")", member)
		host := fmt.Sprintf("%s.%s.infra.svc", member, svc.Name)
		for flag, want := range map[string]string{
			"name":                        member,
			"initial-advertise-peer-urls": fmt.Sprintf("https://%s:%d", host, port(t, c, "peer")),
			"advertise-client-urls":       fmt.Sprintf("https://%s:%d", host, port(t, c, "client")),
		} {
			if got := flagValue(t, strings.Split(args, "\n"), flag); got != want {
				t.Errorf("member %s: --%s=%s, want %s", member, flag, got, want)
			}
		}
		peers = append(peers, fmt.Sprintf("%s=https://%s:%d", member, host, port(t, c, "peer")))
		clients = append(clients, fmt.Sprintf("https://%s:%d", host, port(t, c, "client")))
	}
	if got := flagValue(t, c.Args, "initial-cluster"); got != strings.Join(peers, ",") {
		t.Errorf("--initial-cluster=%s, want %s", got, strings.Join(peers, ","))
	}
	for _, want := range []string{"--client-cert-auth", "--peer-client-cert-auth"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("etcd args lack %s: any pod could read the store", want)
		}
	}
	tls := volume(t, pod, "tls")
	if tls.Secret == nil || tls.Secret.SecretName != "rezus-etcd-server" {
		t.Errorf("etcd's tls volume %+v, want the Secret etcd.serverSecret", tls.VolumeSource)
	}
	dir := mount(t, c, "tls").MountPath
	for _, flag := range []string{"trusted-ca-file", "cert-file", "key-file", "peer-trusted-ca-file", "peer-cert-file", "peer-key-file"} {
		if f := flagValue(t, c.Args, flag); path.Dir(f) != dir || !secretHas(tls, path.Base(f)) {
			t.Errorf("--%s=%s is not a key of the Secret mounted at %s", flag, f, dir)
		}
	}
	if d := flagValue(t, c.Args, "data-dir"); !strings.HasPrefix(d, mount(t, c, "data").MountPath+"/") {
		t.Errorf("--data-dir=%s is not on the data volume", d)
	}
	if pdb := r.budgets[etcd.Name]; pdb == nil {
		t.Errorf("no disruption budget %s: a drain may take etcd's quorum", etcd.Name)
	} else if pdb.Spec.MinAvailable.String() != fmt.Sprint(n/2+1) || !selects(pdb.Spec.Selector.MatchLabels, etcd.Spec.Template.Labels) {
		t.Errorf("etcd's disruption budget keeps %s of the pods %v, want %d of its members", pdb.Spec.MinAvailable, pdb.Spec.Selector.MatchLabels, n/2+1)
	}
	return clients
}

// checkHeadless returns the headless Service name of a StatefulSet, which
// gives each pod a DNS name, also before the pod is ready.
func checkHeadless(t *testing.T, r rendered, name string) *corev1.Service {
	t.Helper()
	svc := r.services[name]
	if svc == nil {
		t.Fatalf("no Service %q: %v", name, keys(r.services))
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s has clusterIP %q, publishNotReadyAddresses %v: want a headless Service that publishes pods not ready", name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
	}
	return svc
}

// checkEtcdClient: the client certificate's files reach the server as
// the private copies of a Secret's keys.
func checkEtcdClient(t *testing.T, pod corev1.PodSpec, c corev1.Container, secret string) {
	t.Helper()
	checkPrivateCopy(t, pod, c, "etcd")
	v := volume(t, pod, "etcd")
	if v.Secret == nil || v.Secret.SecretName != secret {
		t.Errorf("volume etcd %+v, want the Secret %s", v.VolumeSource, secret)
	}
	for _, flag := range []string{"etcd-ca-file", "etcd-cert-file", "etcd-key-file"} {
		if f := flagValue(t, c.Args, flag); path.Dir(f) != "/etc/rezuscloud/private/etcd" || !secretHas(v, path.Base(f)) {
			t.Errorf("--%s=%s is not the private copy of a key of %s", flag, f, secret)
		}
	}
}

// checkLabelsApart: the server's Services reach the replicas only, and
// etcd's reaches its members only.
func checkLabelsApart(t *testing.T, r rendered, set, etcd *appsv1.StatefulSet) {
	t.Helper()
	for _, svc := range r.services {
		mine := svc.Name == etcd.Spec.ServiceName
		if selects(svc.Spec.Selector, etcd.Spec.Template.Labels) != mine || selects(svc.Spec.Selector, set.Spec.Template.Labels) == mine {
			t.Errorf("Service %s selects %v: replicas %v, etcd members %v", svc.Name, svc.Spec.Selector, set.Spec.Template.Labels, etcd.Spec.Template.Labels)
		}
	}
}

// checkEtcdFlags fails for every --flag in args that the etcd binary does
// not have, asked with `etcd --help`; without the binary (in
// REZUSCLOUD_KUBE_BIN or on PATH) it says so and checks nothing.
func checkEtcdFlags(t *testing.T, args []string) {
	t.Helper()
	bin, err := exec.LookPath(filepath.Join(os.Getenv("REZUSCLOUD_KUBE_BIN"), "etcd"))
	if os.Getenv("REZUSCLOUD_KUBE_BIN") == "" {
		bin, err = exec.LookPath("etcd")
	}
	if err != nil {
		t.Logf("no etcd binary (REZUSCLOUD_KUBE_BIN or PATH): its flags are not checked")
		return
	}
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+--([a-z0-9-]+)`).FindAllSubmatch(out, -1) {
		known[string(m[1])] = true
	}
	if !known["data-dir"] {
		t.Fatalf("%s --help lists no flags:\n%s", bin, out)
	}
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !known[name] {
			t.Errorf("%q is not a flag of %s", a, bin)
		}
	}
}

// flagValue returns the value of --name=VALUE in args, failing the test
// when it is missing or repeated.
func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	var vals []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			vals = append(vals, v)
		}
	}
	if len(vals) != 1 {
		t.Errorf("--%s given %d times in %q, want once", name, len(vals), args)
		return ""
	}
	return vals[0]
}

func port(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %s", c.Name, name)
	return 0
}

// selects says whether a Service or budget selector matches labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func secretHas(v corev1.Volume, key string) bool {
	return v.Secret != nil && slices.ContainsFunc(v.Secret.Items, func(k corev1.KeyToPath) bool { return k.Key == key && k.Path == key })
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
