// Package chart tests charts/kao with the helm that `make tools` builds:
// helm lint, golden files of helm template for the main value sets, the same
// rules and CRDs as config/, and clear refusals of bad values.
package chart

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kao-io/kao/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from helm template")

func helmBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("chart tests: skipped in -short mode (they need the helm of make tools)")
	}
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "tools.sh"), "dir", "helm").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "helm")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("helm not built: run make tools (%v)", err)
	}
	return bin
}

func chartDir() string { return filepath.Join(testenv.RepoRoot(), "charts", "kao") }

// helm runs helm with an empty home of its own and returns stdout, stderr.
func helm(t *testing.T, bin string, args ...string) (string, string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// valueSets are the value files of the golden files, by name.
var valueSets = map[string]string{
	"default": "",
	"namespaced": `
watch:
  mode: namespaced
  namespaces: [team-a, team-b]
metrics:
  serviceMonitor:
    enabled: true
    labels: {release: prometheus}
    interval: 1m
  prometheusRule:
    enabled: true
    labels: {release: prometheus}
  dashboard:
    enabled: true
    namespace: monitoring
`,
	"job-executor": `
watch:
  mode: namespaced
  namespaces: [team-a]
imagePullSecrets: [{name: dc1-registry}]
executor:
  type: job
  resources:
    requests: {cpu: 500m, memory: 512Mi}
    limits: {memory: 2Gi}
`,
	"pinned-offline": `
image:
  repository: registry.dc1.example/kao/kao-manager
  digest: sha256:31a15de2081acd1ea857fda71ae3b7fcd87de25c8589491bc6eda7402472d9e2
imagePullSecrets: [{name: dc1-registry}]
state:
  storageClassName: local-ssd
  size: 50Gi
metrics:
  enabled: false
logRetention: 10
runTimeout: 90m
userRoles:
  dir: /opt/ops/roles
  fromConfigMaps: true
security:
  allowedArtifactURLs: [https://bundles.dc1.example/kao]
  allowedInClusterNamespaces: [karmada-*]
hostClusterRBAC: true
extraVolumes: [{name: ops-roles, configMap: {name: ops-roles}}]
extraVolumeMounts: [{name: ops-roles, mountPath: /opt/ops/roles}]
nodeSelector: {node-role.kubernetes.io/control-plane: ""}
`,
}

func valuesFile(t *testing.T, values string) []string {
	t.Helper()
	if values == "" {
		return nil
	}
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"-f", f}
}

func render(t *testing.T, bin, values string) string {
	t.Helper()
	args := append([]string{"template", "kao", chartDir(), "--namespace", "kao-system", "--include-crds"}, valuesFile(t, values)...)
	out, stderr, err := helm(t, bin, args...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	return out
}

func TestLint(t *testing.T) {
	bin := helmBin(t)
	for name, values := range valueSets {
		args := append([]string{"lint", "--strict", chartDir()}, valuesFile(t, values)...)
		if out, stderr, err := helm(t, bin, args...); err != nil {
			t.Errorf("helm lint %s: %v\n%s%s", name, err, out, stderr)
		}
	}
}

func TestTemplateGolden(t *testing.T) {
	bin := helmBin(t)
	for name, values := range valueSets {
		got := render(t, bin, values)
		path := filepath.Join("testdata", name+".golden.yaml")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if got != string(want) {
			t.Errorf("helm template with %s values differs from %s; review, then go test ./test/chart -update", name, path)
		}
	}
}

// docs splits a multi-document YAML stream into objects, by kind/name.
func docs(t *testing.T, stream string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range strings.Split(stream, "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if obj == nil {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		out[obj["kind"].(string)+"/"+meta["name"].(string)] = obj
	}
	return out
}

func readObj(t *testing.T, rel string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), rel))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj != nil && obj["kind"] != "Namespace" && obj["kind"] != "PersistentVolumeClaim" {
			return obj
		}
	}
	t.Fatalf("no object in %s", rel)
	return nil
}

// The chart and config/ install one operator: the same rules, CRDs and pod
// security.
func TestChartMatchesConfig(t *testing.T) {
	bin := helmBin(t)
	objs := docs(t, render(t, bin, valueSets["pinned-offline"]))
	for kind, rel := range map[string]string{
		"ClusterRole/kao-manager":              "config/rbac/role.yaml",
		"ClusterRole/kao-manager-host-cluster": "config/rbac-host-cluster/role.yaml",
	} {
		if got, want := objs[kind]["rules"], readObj(t, rel)["rules"]; !reflect.DeepEqual(got, want) {
			t.Errorf("%s rules differ from %s: run make manifests", kind, rel)
		}
	}
	for _, crd := range []string{"karmadadeployments", "etcdbackups", "etcdrestores"} {
		got := objs["CustomResourceDefinition/"+crd+".kao.io"]
		if !reflect.DeepEqual(got, readObj(t, "config/crd/bases/kao.io_"+crd+".yaml")) {
			t.Errorf("CRD %s differs from config/crd: run make manifests", crd)
		}
	}
	pod := func(obj map[string]any) map[string]any {
		return obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	}
	chart, config := pod(objs["Deployment/kao-manager"]), pod(readObj(t, "config/manager/manager.yaml"))
	if !reflect.DeepEqual(chart["securityContext"], config["securityContext"]) {
		t.Errorf("pod securityContext: chart %v, config/manager %v", chart["securityContext"], config["securityContext"])
	}
	container := func(p map[string]any) map[string]any { return p["containers"].([]any)[0].(map[string]any) }
	for _, field := range []string{"securityContext", "livenessProbe", "readinessProbe"} {
		if !reflect.DeepEqual(container(chart)[field], container(config)[field]) {
			t.Errorf("container %s: chart %v, config/manager %v", field, container(chart)[field], container(config)[field])
		}
	}

	// With default values: the same flags (the chart also spells out the
	// manager's own defaults), mounts, volumes and update strategy.
	def := docs(t, render(t, bin, ""))["Deployment/kao-manager"]
	chart = pod(def)
	args := map[any]bool{}
	for _, a := range container(chart)["args"].([]any) {
		args[a] = true
	}
	for _, a := range container(config)["args"].([]any) {
		if !args[a] {
			t.Errorf("config/manager's flag %v is not in the chart's", a)
		}
	}
	if !reflect.DeepEqual(container(chart)["volumeMounts"], container(config)["volumeMounts"]) {
		t.Errorf("volumeMounts: chart %v, config/manager %v", container(chart)["volumeMounts"], container(config)["volumeMounts"])
	}
	names := func(p map[string]any) []any {
		var out []any
		for _, v := range p["volumes"].([]any) {
			out = append(out, v.(map[string]any)["name"])
		}
		return out
	}
	if !reflect.DeepEqual(names(chart), names(config)) {
		t.Errorf("volumes: chart %v, config/manager %v", names(chart), names(config))
	}
	strategy := func(obj map[string]any) any { return obj["spec"].(map[string]any)["strategy"] }
	if !reflect.DeepEqual(strategy(def), strategy(readObj(t, "config/manager/manager.yaml"))) {
		t.Errorf("strategy: chart %v, config/manager %v", strategy(def), strategy(readObj(t, "config/manager/manager.yaml")))
	}
}

// The chart's PrometheusRule holds config/prometheus's rules, and its
// dashboard ConfigMap config/grafana's dashboard, with the labels asked for.
func TestChartAlertsAndDashboard(t *testing.T) {
	bin := helmBin(t)
	objs := docs(t, render(t, bin, valueSets["namespaced"]))
	rule, ok := objs["PrometheusRule/kao-manager"]
	if !ok {
		t.Fatal("no PrometheusRule/kao-manager with metrics.prometheusRule.enabled")
	}
	if got, want := rule["spec"], readObj(t, "config/prometheus/prometheusrule.yaml")["spec"]; !reflect.DeepEqual(got, want) {
		t.Errorf("the PrometheusRule's spec differs from config/prometheus/prometheusrule.yaml's: run make manifests")
	}
	meta := func(obj map[string]any) map[string]any { return obj["metadata"].(map[string]any) }
	if labels := meta(rule)["labels"].(map[string]any); labels["release"] != "prometheus" || labels["app.kubernetes.io/name"] != "kao" {
		t.Errorf("PrometheusRule labels %v: want release: prometheus beside the chart's own", labels)
	}
	cm, ok := objs["ConfigMap/kao-manager-dashboard"]
	if !ok {
		t.Fatal("no ConfigMap/kao-manager-dashboard with metrics.dashboard.enabled")
	}
	if ns := meta(cm)["namespace"]; ns != "monitoring" {
		t.Errorf("dashboard ConfigMap in namespace %v, want metrics.dashboard.namespace monitoring", ns)
	}
	if labels := meta(cm)["labels"].(map[string]any); labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v: want the sidecar's grafana_dashboard: \"1\" by default", labels)
	}
	dashboard, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "grafana", "kao-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cm["data"].(map[string]any)["kao-dashboard.json"]; got != strings.TrimSuffix(string(dashboard), "\n") {
		t.Errorf("the ConfigMap's kao-dashboard.json differs from config/grafana/kao-dashboard.json: run make manifests")
	}
	// Off by default: the PrometheusRule CRD may be absent.
	for kind := range docs(t, render(t, bin, "")) {
		if strings.HasPrefix(kind, "PrometheusRule/") || kind == "ConfigMap/kao-manager-dashboard" {
			t.Errorf("default values render %s", kind)
		}
	}
}

// The chart's ServiceMonitor scrapes the metrics Service, and only it, on its
// port metrics, with honorLabels: true (kao's namespace label is the
// deployment's and must not become exported_namespace).
func TestChartServiceMonitor(t *testing.T) {
	bin := helmBin(t)
	objs := docs(t, render(t, bin, valueSets["namespaced"]))
	sm, ok := objs["ServiceMonitor/kao-manager"]
	if !ok {
		t.Fatal("no ServiceMonitor/kao-manager with metrics.serviceMonitor.enabled")
	}
	if sm["apiVersion"] != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %v", sm["apiVersion"])
	}
	meta := func(obj map[string]any) map[string]any { return obj["metadata"].(map[string]any) }
	if labels := meta(sm)["labels"].(map[string]any); labels["release"] != "prometheus" || labels["app.kubernetes.io/name"] != "kao" {
		t.Errorf("ServiceMonitor labels %v: want release: prometheus beside the chart's own", labels)
	}
	spec := sm["spec"].(map[string]any)
	selector := spec["selector"].(map[string]any)["matchLabels"].(map[string]any)
	namespaces := spec["namespaceSelector"].(map[string]any)["matchNames"].([]any)

	// The Services it selects: the metrics Service, and no other.
	var selected []string
	for key, obj := range objs {
		if !strings.HasPrefix(key, "Service/") || !slices.Contains(namespaces, meta(obj)["namespace"]) {
			continue
		}
		labels, _ := meta(obj)["labels"].(map[string]any)
		matches := len(selector) > 0
		for k, v := range selector {
			if labels[k] != v {
				matches = false
			}
		}
		if matches {
			selected = append(selected, key)
		}
	}
	if !slices.Equal(selected, []string{"Service/kao-manager-metrics"}) {
		t.Fatalf("the ServiceMonitor's selector %v in namespaces %v selects %v, want Service/kao-manager-metrics", selector, namespaces, selected)
	}
	var ports []any
	for _, p := range objs["Service/kao-manager-metrics"]["spec"].(map[string]any)["ports"].([]any) {
		ports = append(ports, p.(map[string]any)["name"])
	}
	endpoints := spec["endpoints"].([]any)
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v, want one", endpoints)
	}
	ep := endpoints[0].(map[string]any)
	if ep["port"] != "metrics" || !slices.Contains(ports, ep["port"]) {
		t.Errorf("ServiceMonitor port %v, want metrics, a port of the Service (%v)", ep["port"], ports)
	}
	if ep["honorLabels"] != true {
		t.Errorf("ServiceMonitor honorLabels %v, want true: kao's namespace label would become exported_namespace", ep["honorLabels"])
	}
	if ep["interval"] != "1m" {
		t.Errorf("ServiceMonitor interval %v, want metrics.serviceMonitor.interval 1m", ep["interval"])
	}
	def := docs(t, render(t, bin, "metrics: {serviceMonitor: {enabled: true}}"))["ServiceMonitor/kao-manager"]
	if got := def["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["interval"]; got != "30s" {
		t.Errorf("ServiceMonitor interval %v by default, want 30s", got)
	}
	// Off by default: the ServiceMonitor CRD may be absent.
	for kind := range docs(t, render(t, bin, "")) {
		if strings.HasPrefix(kind, "ServiceMonitor/") {
			t.Errorf("default values render %s", kind)
		}
	}
}

func TestBadValuesAreRefused(t *testing.T) {
	bin := helmBin(t)
	for values, want := range map[string]string{
		"watch: {mode: namespaced}":                                  "watch.mode namespaced needs watch.namespaces",
		"watch: {mode: everywhere}":                                  "/watch/mode",
		"watch: {mode: namespaced, namespaces: [Team_A]}":            "namespaces",
		"image: {digest: latest}":                                    "digest",
		"runTimeout: soon":                                           "runTimeout",
		"metrics: {port: 0}":                                         "port",
		"metrics: {enabled: false, prometheusRule: {enabled: true}}": "metrics.prometheusRule.enabled needs metrics.enabled",
		"metrics: {enabled: false, dashboard: {enabled: true}}":      "metrics.dashboard.enabled needs metrics.enabled",
		"metrics: {enabled: false, serviceMonitor: {enabled: true}}": "metrics.serviceMonitor.enabled needs metrics.enabled",
		"metrics: {serviceMonitor: {interval: soon}}":                "interval",
		"metrics: {serviceMonitor: {scrapeTimeout: 10s}}":            "scrapeTimeout",
		"metrics: {serviceMonitor: {labels: {release: 1}}}":          "labels",
		"metrics: {dashboard: {namespace: Monitoring}}":              "namespace",
		"metrics: {prometheusRule: {labels: {release: 1}}}":          "labels",
	} {
		args := append([]string{"template", "kao", chartDir()}, valuesFile(t, values)...)
		_, stderr, err := helm(t, bin, args...)
		if err == nil || !strings.Contains(stderr, want) {
			t.Errorf("values %q: want an error naming %q, got %v: %s", values, want, err, stderr)
		}
	}
}
