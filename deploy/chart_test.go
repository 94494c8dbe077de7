package deploy

import (
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
	"sigs.k8s.io/yaml"
)

const chartDir = "helm/rezuscloud"

// custom are non-default values: an ingress and every optional secret.
var custom = map[string]any{
	"repo":    map[string]any{"url": "https://git.example.com/fleet.git", "branch": "prod"},
	"workers": 4,
	"ingress": map[string]any{"enabled": true, "className": "nginx", "host": "rezus.example.com", "tlsSecret": "rezus-tls"},
	"secrets": map[string]any{
		"webhook":     "rezus-webhook",
		"git":         map[string]any{"secret": "rezus-git", "type": "ssh"},
		"openstack":   "rezus-openstack",
		"oci":         "rezus-oci",
		"githubToken": "rezus-github",
	},
	"persistence": map[string]any{"size": "50Gi", "storageClass": "fast"},
}

// rendered is one render of the chart, decoded strictly into the
// Kubernetes types: an unknown or misspelt field fails the decode.
type rendered struct {
	deploy  *appsv1.Deployment
	pvc     *corev1.PersistentVolumeClaim
	service *corev1.Service
	ingress *networkingv1.Ingress
}

func render(t *testing.T, vals map[string]any) rendered {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	lintChart(t, vals)
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "rezus", Namespace: "infra", IsInstall: true}, nil)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	files, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return decode(t, ch, files)
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
	var r rendered
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
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var into any
			switch meta.Kind {
			case "Deployment":
				r.deploy = &appsv1.Deployment{}
				into = r.deploy
			case "PersistentVolumeClaim":
				r.pvc = &corev1.PersistentVolumeClaim{}
				into = r.pvc
			case "Service":
				r.service = &corev1.Service{}
				into = r.service
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
	if r.deploy == nil || r.service == nil {
		t.Fatalf("render has no Deployment or Service: %v", names)
	}
	return r
}
