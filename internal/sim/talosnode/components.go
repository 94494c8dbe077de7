package talosnode

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"

	"github.com/rezuscloud/rezuscloud/internal/sim/kubeapi"
	"github.com/rezuscloud/rezuscloud/internal/sim/kubelet"
)

// components are what a node's config says of the Kubernetes components
// it runs.
type components struct {
	// kubelet is the kubelet's version, the tag of its image (v1.34.1).
	kubelet string
	// static are a control plane's static pods: kube-apiserver,
	// kube-controller-manager and kube-scheduler with their images.
	static []kubelet.StaticPod
	// apiServerArgs are the extra arguments of the API server the
	// simulated cloud runs for the cluster: the release its image names
	// (--emulated-version, within what the binary can emulate) and the
	// config's runtime-config.
	apiServerArgs []string
}

// componentsOf reads the components of a machine config: from its
// v1alpha1 document (cluster.apiServer, machine.kubelet, ...), and from
// the documents of their own that newer configs give them
// (KubeAPIServerConfig, KubeletConfig, ...).
func componentsOf(config []byte) components {
	type pod struct {
		Image     string         `yaml:"image"`
		ExtraArgs map[string]any `yaml:"extraArgs"`
	}
	var v1 struct {
		Machine *struct {
			Kubelet pod `yaml:"kubelet"`
		} `yaml:"machine"`
		Cluster struct {
			APIServer         pod `yaml:"apiServer"`
			ControllerManager pod `yaml:"controllerManager"`
			Scheduler         pod `yaml:"scheduler"`
		} `yaml:"cluster"`
	}
	var klet, api, cm, sched pod
	dec := yaml.NewDecoder(bytes.NewReader(config))
	for {
		var node yaml.Node
		if err := dec.Decode(&node); err != nil {
			if !errors.Is(err, io.EOF) {
				return components{}
			}
			break
		}
		var head struct {
			Kind    string `yaml:"kind"`
			Machine any    `yaml:"machine"`
		}
		if node.Decode(&head) != nil {
			continue
		}
		var into *pod
		switch head.Kind {
		case "KubeletConfig":
			into = &klet
		case "KubeAPIServerConfig":
			into = &api
		case "KubeControllerManagerConfig":
			into = &cm
		case "KubeSchedulerConfig":
			into = &sched
		case "":
			if head.Machine != nil && node.Decode(&v1) == nil && v1.Machine != nil {
				klet, api, cm, sched = v1.Machine.Kubelet, v1.Cluster.APIServer, v1.Cluster.ControllerManager, v1.Cluster.Scheduler
			}
			continue
		default:
			continue
		}
		_ = node.Decode(into)
	}
	c := components{kubelet: imageTag(klet.Image)}
	for _, sp := range []kubelet.StaticPod{
		{Component: "kube-apiserver", Image: api.Image},
		{Component: "kube-controller-manager", Image: cm.Image},
		{Component: "kube-scheduler", Image: sched.Image},
	} {
		if sp.Image != "" {
			c.static = append(c.static, sp)
		}
	}
	if minor, ok := minorOf(imageTag(api.Image)); ok && minor >= kubeapi.EmulationMinors[0] && minor < kubeapi.EmulationMinors[1] {
		c.apiServerArgs = append(c.apiServerArgs, "--emulated-version=kube=1."+strconv.Itoa(minor))
	}
	if rc := argValue(api.ExtraArgs["runtime-config"]); rc != "" {
		c.apiServerArgs = append(c.apiServerArgs, "--runtime-config="+rc)
	}
	return c
}

// argValue is an extra argument's value: a string, or a list of them
// (joined with commas, as the component reads a repeated flag).
func argValue(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		var parts []string
		for _, p := range v {
			if s, ok := p.(string); ok {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, ",")
	}
	return ""
}

// imageTag is the tag of an image reference ("" when it has none).
func imageTag(image string) string {
	i := strings.LastIndex(image, ":")
	if i < 0 || i < strings.LastIndex(image, "/") {
		return ""
	}
	return image[i+1:]
}

// minorOf is the minor version of a tag of the form v1.34.1.
func minorOf(tag string) (int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(tag, "v"), ".", 3)
	if len(parts) < 2 || parts[0] != "1" {
		return 0, false
	}
	m, err := strconv.Atoi(parts[1])
	return m, err == nil
}

// follow restarts the API server of cluster when the arguments its
// bootstrapped node's config asks for differ from those it runs with, as
// a new config restarts a control plane's kube-apiserver static pod. One
// restart runs at a time, on a goroutine of its own.
func (k *kubePlanes) follow(h *Host, cluster string, args []string) {
	k.mu.Lock()
	p := k.byCluster[cluster]
	if p == nil || p.cp == nil || p.restarting || slices.Equal(p.cp.APIServerArgs(), args) {
		k.mu.Unlock()
		return
	}
	p.restarting = true
	k.wg.Add(1)
	k.mu.Unlock()
	go func() {
		defer k.wg.Done()
		err := p.cp.RestartAPIServer(h.ctx, args)
		if err != nil {
			h.log.Warn("the tenant's Kubernetes API did not restart", "cluster", cluster, "err", err)
		}
		k.mu.Lock()
		p.restarting = false
		k.mu.Unlock()
	}()
}
