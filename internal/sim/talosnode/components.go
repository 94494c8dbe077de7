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

// componentsOf reads the components of a machine config's v1alpha1
// document.
func componentsOf(config []byte) components {
	var doc struct {
		Machine struct {
			Kubelet struct {
				Image string `yaml:"image"`
			} `yaml:"kubelet"`
		} `yaml:"machine"`
		Cluster struct {
			APIServer struct {
				Image     string            `yaml:"image"`
				ExtraArgs map[string]string `yaml:"extraArgs"`
			} `yaml:"apiServer"`
			ControllerManager struct {
				Image string `yaml:"image"`
			} `yaml:"controllerManager"`
			Scheduler struct {
				Image string `yaml:"image"`
			} `yaml:"scheduler"`
		} `yaml:"cluster"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(config))
	for {
		var d struct {
			Machine any `yaml:"machine"`
		}
		var node yaml.Node
		if err := dec.Decode(&node); err != nil {
			if !errors.Is(err, io.EOF) {
				return components{}
			}
			break
		}
		if node.Decode(&d) == nil && d.Machine != nil {
			_ = node.Decode(&doc)
			break
		}
	}
	c := components{kubelet: imageTag(doc.Machine.Kubelet.Image)}
	cl := doc.Cluster
	for _, sp := range []kubelet.StaticPod{
		{Component: "kube-apiserver", Image: cl.APIServer.Image},
		{Component: "kube-controller-manager", Image: cl.ControllerManager.Image},
		{Component: "kube-scheduler", Image: cl.Scheduler.Image},
	} {
		if sp.Image != "" {
			c.static = append(c.static, sp)
		}
	}
	if minor, ok := minorOf(imageTag(cl.APIServer.Image)); ok && minor >= kubeapi.EmulationMinors[0] && minor < kubeapi.EmulationMinors[1] {
		c.apiServerArgs = append(c.apiServerArgs, "--emulated-version=kube=1."+strconv.Itoa(minor))
	}
	if rc := cl.APIServer.ExtraArgs["runtime-config"]; rc != "" {
		c.apiServerArgs = append(c.apiServerArgs, "--runtime-config="+rc)
	}
	return c
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
