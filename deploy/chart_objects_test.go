package deploy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestChartDefaults(t *testing.T) {
	r := render(t, nil)
	d := r.deploy
	checkOneWriter(t, d)
	pod := d.Spec.Template.Spec
	c := server(t, pod)
	checkProbes(t, c)
	checkSecurity(t, pod, c)
	checkServeFlags(t, "chart args", c.Args)
	checkEnv(t, "chart env", envOf(c))

	if r.pvc == nil {
		t.Fatal("no PersistentVolumeClaim for the data dir")
	}
	if got := r.pvc.Spec.AccessModes; !slices.Equal(got, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("PVC access modes %v, want [ReadWriteOnce]", got)
	}
	if got := r.pvc.Annotations["helm.sh/resource-policy"]; got != "keep" {
		t.Errorf("PVC resource policy %q, want keep: uninstalling must not delete the store", got)
	}
	if v := volume(t, pod, "data"); v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != r.pvc.Name {
		t.Errorf("volume data does not use the chart's claim %s: %+v", r.pvc.Name, v.VolumeSource)
	}
	if m := mount(t, c, "data"); m.MountPath != "/var/lib/rezuscloud" {
		t.Errorf("data mounted at %s, want the image's volume /var/lib/rezuscloud", m.MountPath)
	}
	checkSecretFile(t, pod, c, "tokens", "rezuscloud-tokens", "/etc/rezuscloud/tokens")
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--sops-age-key-file") {
			t.Errorf("%s without secrets.sopsAge", a)
		}
		if strings.HasPrefix(a, "--notifications") {
			t.Errorf("%s without secrets.notifications", a)
		}
	}
	for _, v := range pod.Volumes {
		if v.Name == "sops" || v.Name == "notifications" {
			t.Errorf("a %s volume without its secret: %+v", v.Name, v.VolumeSource)
		}
	}
	for _, m := range c.VolumeMounts {
		if m.Name == "sops" || m.Name == "notifications" {
			t.Errorf("the server mounts %s at %s without its secret", m.Name, m.MountPath)
		}
	}
	if r.ingress != nil {
		t.Error("an Ingress without ingress.enabled")
	}
	if len(pod.InitContainers) != 0 {
		t.Errorf("init containers %d without cloud credentials, want none", len(pod.InitContainers))
	}
	if got := c.Resources.Requests.Memory().String(); got != "768Mi" {
		t.Errorf("memory request %s, want the measured 768Mi", got)
	}
	if got := r.service.Spec.Ports; len(got) != 1 || got[0].Port != 8080 || got[0].TargetPort.StrVal != "http" {
		t.Errorf("service ports %+v, want 8080 to the http port", got)
	}
}

func TestChartCustom(t *testing.T) {
	r := render(t, custom)
	d := r.deploy
	checkOneWriter(t, d)
	pod := d.Spec.Template.Spec
	c := server(t, pod)
	checkProbes(t, c)
	checkSecurity(t, pod, c)

	if r.ingress == nil {
		t.Fatal("no Ingress with ingress.enabled")
	}
	rule := r.ingress.Spec.Rules[0]
	if rule.Host != "rezus.example.com" || rule.HTTP.Paths[0].Backend.Service.Name != r.service.Name {
		t.Errorf("ingress rule %+v, want rezus.example.com to service %s", rule, r.service.Name)
	}
	if tls := r.ingress.Spec.TLS; len(tls) != 1 || tls[0].SecretName != "rezus-tls" {
		t.Errorf("ingress TLS %+v, want the secret rezus-tls", tls)
	}
	if got := *r.pvc.Spec.StorageClassName; got != "fast" {
		t.Errorf("storage class %q, want fast", got)
	}
	checkSecretFile(t, pod, c, "webhook", "rezus-webhook", "/etc/rezuscloud/webhook")
	checkSecretFile(t, pod, c, "git", "rezus-git", "/etc/rezuscloud/git")
	checkSecretFile(t, pod, c, "github", "rezus-github", "/etc/rezuscloud/github")
	checkSecretFile(t, pod, c, "sops", "rezus-sops-age", "/etc/rezuscloud/sops")
	if items := volume(t, pod, "sops").Secret.Items; len(items) != 1 || items[0].Key != "age.agekey" || items[0].Path != "age.agekey" {
		t.Errorf("sops volume items %+v, want the key age.agekey as the file age.agekey", items)
	}
	// The config and the secret files it names, relative to its directory:
	// every key of the Secret is a file beside notifications.yaml.
	checkSecretFile(t, pod, c, "notifications", "rezus-notifications", "/etc/rezuscloud/notifications")
	if items := volume(t, pod, "notifications").Secret.Items; len(items) != 0 {
		t.Errorf("notifications volume items %+v, want every key of the Secret as a file", items)
	}
	for _, want := range []string{
		"--repo=https://git.example.com/fleet.git", "--branch=prod", "--workers=4",
		"--webhook-secret-file=/etc/rezuscloud/webhook/secret",
		"--openstack-clouds=/etc/rezuscloud/private/openstack/clouds.yaml",
		"--oci-config=/etc/rezuscloud/private/oci/config",
		"--github-token-file=/etc/rezuscloud/github/token",
		"--sops-age-key-file=/etc/rezuscloud/sops/age.agekey",
		"--notifications=/etc/rezuscloud/notifications/notifications.yaml",
	} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	checkServeFlags(t, "chart args", c.Args)
	checkEnv(t, "chart env", envOf(c))
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Errorf("env %s comes from %+v: secrets are files, never environment", e.Name, e.ValueFrom)
		}
		env[e.Name] = e.Value
	}
	if env["REZUSCLOUD_GIT_SSH_KEY_FILE"] != "/etc/rezuscloud/git/ssh-privatekey" || env["REZUSCLOUD_GIT_KNOWN_HOSTS_FILE"] != "/etc/rezuscloud/git/known_hosts" {
		t.Errorf("git ssh environment %v, want the key and known_hosts files of the git secret", env)
	}
	checkPrivateCopy(t, pod, c, "openstack", "oci")
}

// envOf returns the container's environment as NAME=value.
func envOf(c corev1.Container) []string {
	var out []string
	for _, e := range c.Env {
		out = append(out, e.Name+"="+e.Value)
	}
	return out
}

// checkPrivateCopy: the credentials of names (the cloud credentials, the
// etcd client certificate) reach the server as 0600 files in memory,
// copied by the init container from their Secret volumes.
func checkPrivateCopy(t *testing.T, pod corev1.PodSpec, c corev1.Container, names ...string) {
	t.Helper()
	if len(pod.InitContainers) != 1 {
		t.Fatalf("init containers %d, want the one that copies cloud credentials", len(pod.InitContainers))
	}
	ic := pod.InitContainers[0]
	checkContainerSecurity(t, ic)
	if v := volume(t, pod, "private"); v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("volume private %+v, want an emptyDir in memory", v.VolumeSource)
	}
	if m := mount(t, c, "private"); !m.ReadOnly || m.MountPath != "/etc/rezuscloud/private" {
		t.Errorf("server mounts private as %+v, want read-only at /etc/rezuscloud/private", m)
	}
	script := strings.Join(ic.Command, " ")
	if !strings.Contains(script, "install -m 0600") {
		t.Errorf("init container command %q does not install the files with mode 0600", script)
	}
	loop := regexp.MustCompile(`for d in ([a-z ]+); do`).FindStringSubmatch(script)
	for _, name := range names {
		if v := volume(t, pod, name); v.Secret == nil {
			t.Errorf("volume %s is not a Secret", name)
		}
		if m := mount(t, ic, name); m.MountPath != "/etc/rezuscloud/secrets/"+name {
			t.Errorf("init container mounts %s at %s", name, m.MountPath)
		}
		if loop == nil || !slices.Contains(strings.Fields(loop[1]), name) {
			t.Errorf("init container command %q does not copy %s", script, name)
		}
	}
}

func checkOneWriter(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want 1: bbolt has one writer", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("strategy %q, want Recreate", d.Spec.Strategy.Type)
	}
	if got := d.Spec.Template.Spec.TerminationGracePeriodSeconds; got == nil || *got < 5*60 {
		t.Errorf("termination grace %v s, want at least the server's 5 minute shutdown grace", got)
	}
}

func checkProbes(t *testing.T, c corev1.Container) {
	t.Helper()
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", p.name)
			continue
		}
		if p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.StrVal != "http" {
			t.Errorf("%s probe %s on port %v, want %s on http", p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port, p.path)
		}
	}
}

func checkSecurity(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	checkPodSecurity(t, pod)
	checkContainerSecurity(t, c)
	if m := mount(t, c, "tmp"); m.MountPath != "/tmp" {
		t.Errorf("tmp mounted at %s, want /tmp on the read-only root", m.MountPath)
	}
}

func checkPodSecurity(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("pod security context %+v, want runAsNonRoot and a non-zero runAsUser", sc)
	}
	if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod seccomp profile %+v, want RuntimeDefault", sc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token it never uses")
	}
}

func checkContainerSecurity(t *testing.T, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Fatalf("container %s has no security context", c.Name)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container %s: root filesystem writable", c.Name)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container %s: privilege escalation allowed", c.Name)
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container %s: capabilities %+v, want drop [ALL] and none added", c.Name, sc.Capabilities)
	}
}

// checkSecretFile: Secret secret is volume name, mounted read-only as
// files at dir.
func checkSecretFile(t *testing.T, pod corev1.PodSpec, c corev1.Container, name, secret, dir string) {
	t.Helper()
	v := volume(t, pod, name)
	if v.Secret == nil || v.Secret.SecretName != secret {
		t.Errorf("volume %s is %+v, want the Secret %s", name, v.VolumeSource, secret)
	} else if m := v.Secret.DefaultMode; m == nil || *m&0o007 != 0 {
		t.Errorf("secret volume %s mode %s: others may read it", name, mode(m))
	}
	m := mount(t, c, name)
	if m.MountPath != dir || !m.ReadOnly {
		t.Errorf("secret %s mounted as %+v, want read-only at %s", secret, m, dir)
	}
}

func server(t *testing.T, pod corev1.PodSpec) corev1.Container {
	t.Helper()
	for _, c := range pod.Containers {
		if c.Name == "rezuscloud" {
			return c
		}
	}
	t.Fatal("no container rezuscloud")
	return corev1.Container{}
}

func volume(t *testing.T, pod corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	for _, v := range pod.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %s", name)
	return corev1.Volume{}
}

func mount(t *testing.T, c corev1.Container, name string) corev1.VolumeMount {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("container %s does not mount %s", c.Name, name)
	return corev1.VolumeMount{}
}

func mode(m *int32) string {
	if m == nil {
		return "unset (0644)"
	}
	return fmt.Sprintf("%04o", *m)
}
