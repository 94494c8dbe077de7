package deploy

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "helm/rezuscloud"

// custom are non-default values: an ingress and every optional secret.
var custom = map[string]any{
	"repo":    map[string]any{"url": "https://git.example.com/fleet.git", "branch": "prod"},
	"workers": 4,
	"ingress": map[string]any{"enabled": true, "className": "nginx", "host": "rezus.example.com", "tlsSecret": "rezus-tls"},
	"secrets": map[string]any{
		"webhook":       "rezus-webhook",
		"git":           map[string]any{"secret": "rezus-git", "type": "ssh"},
		"openstack":     "rezus-openstack",
		"oci":           "rezus-oci",
		"githubToken":   "rezus-github",
		"sopsAge":       "rezus-sops-age",
		"notifications": "rezus-notifications",
	},
	"persistence": map[string]any{"size": "50Gi", "storageClass": "fast"},
}

// rendered is one render of the chart, decoded strictly into the
// Kubernetes types: an unknown or misspelt field fails the decode.
type rendered struct {
	deploy  *appsv1.Deployment
	pvc     *corev1.PersistentVolumeClaim
	service *corev1.Service // the server's own, named as the release
	ingress *networkingv1.Ingress
	// Every StatefulSet, Service and PodDisruptionBudget by name.
	sets     map[string]*appsv1.StatefulSet
	services map[string]*corev1.Service
	budgets  map[string]*policyv1.PodDisruptionBudget
}

// fullname is the name of the release's objects in every render.
const fullname = "rezus-rezuscloud"

func render(t *testing.T, vals map[string]any) rendered {
	t.Helper()
	ch, files, err := renderFiles(vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	lintChart(t, vals)
	return decode(t, ch, files)
}

// renderFiles renders the chart with vals as `helm template` does, in
// the namespace infra.
func renderFiles(vals map[string]any) (*chart.Chart, map[string]string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, nil, fmt.Errorf("load chart: %w", err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "rezus", Namespace: "infra", IsInstall: true}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Render(ch, rv)
	return ch, files, err
}

func lintChart(t *testing.T, vals map[string]any) {
	t.Helper()
	res := lint.All(chartDir, vals, "infra", false)
	for _, m := range res.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		}
	}
}

func decode(t *testing.T, ch *chart.Chart, files map[string]string) rendered {
	t.Helper()
	r := rendered{sets: map[string]*appsv1.StatefulSet{}, services: map[string]*corev1.Service{}, budgets: map[string]*policyv1.PodDisruptionBudget{}}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, doc := range strings.Split(files[name], "\n---") {
			if strings.TrimSpace(doc) == "" || strings.HasSuffix(name, ".tpl") {
				continue
			}
			var meta struct {
				Kind     string
				Metadata struct{ Name string }
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var into any
			switch obj := meta.Metadata.Name; meta.Kind {
			case "Deployment":
				r.deploy = &appsv1.Deployment{}
				into = r.deploy
			case "StatefulSet":
				r.sets[obj] = &appsv1.StatefulSet{}
				into = r.sets[obj]
			case "PodDisruptionBudget":
				r.budgets[obj] = &policyv1.PodDisruptionBudget{}
				into = r.budgets[obj]
			case "PersistentVolumeClaim":
				r.pvc = &corev1.PersistentVolumeClaim{}
				into = r.pvc
			case "Service":
				r.services[obj] = &corev1.Service{}
				into = r.services[obj]
			case "Ingress":
				r.ingress = &networkingv1.Ingress{}
				into = r.ingress
			default:
				t.Fatalf("%s: unexpected kind %q in chart %s", name, meta.Kind, ch.Name())
			}
			if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
				t.Fatalf("%s: not a valid %s: %v", name, meta.Kind, err)
			}
		}
	}
	r.service = r.services[fullname]
	if (r.deploy == nil && r.sets[fullname] == nil) || r.service == nil {
		t.Fatalf("render has no Deployment or StatefulSet %s, or no Service %s: %v", fullname, fullname, names)
	}
	return r
}
