package runner

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestObjectChangesNameEachObjectAndItsFields reads kubernetes.core.k8s
// results as the module writes them in check mode with diffs (one object,
// and several in one task): each changed object is a change of its own,
// "Kind namespace/name", with the fields that differ by path; the fields
// the API server keeps itself are left out; a Secret's data and a diff
// holding a key never show; an unchanged object is not listed.
func TestObjectChangesNameEachObjectAndItsFields(t *testing.T) {
	const secret = "c2VjcmV0LXRva2VuLTAxMjM="
	deployment := map[string]any{
		"changed": true, "method": "apply",
		"result": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "karmada-apiserver", "namespace": "karmada-system", "resourceVersion": "12"}},
		"diff": map[string]any{
			"before": map[string]any{
				"metadata": map[string]any{"managedFields": []any{map[string]any{"time": "2026-12-02T10:00:00Z"}}, "generation": 1},
				"spec": map[string]any{"replicas": 1, "template": map[string]any{"spec": map[string]any{"containers": []any{
					map[string]any{"name": "karmada-apiserver", "command": []any{"kube-apiserver", "--max-requests-inflight=300"}, "image": "r/kube-apiserver:v1.35.4"}}}}},
			},
			"after": map[string]any{
				"metadata": map[string]any{"managedFields": []any{map[string]any{"time": "2026-12-02T11:00:00Z"}}, "generation": 2},
				"spec": map[string]any{"replicas": 2, "template": map[string]any{"spec": map[string]any{"containers": []any{
					map[string]any{"name": "karmada-apiserver", "command": []any{"kube-apiserver", "--max-requests-inflight=400"}, "image": "r/kube-apiserver:v1.35.4"}}}}},
			},
		},
	}
	several := map[string]any{
		"changed": true,
		"result": map[string]any{"results": []any{
			map[string]any{"changed": false, "method": "apply", "result": map[string]any{"kind": "Service", "metadata": map[string]any{"name": "same", "namespace": "ns"}}},
			map[string]any{"changed": true, "method": "apply",
				"result": map[string]any{"kind": "Secret", "metadata": map[string]any{"name": "karmada-cert", "namespace": "ns"}},
				"diff":   map[string]any{"before": map[string]any{"data": map[string]any{"token": "b2xk"}}, "after": map[string]any{"data": map[string]any{"token": secret}}}},
			map[string]any{"changed": true, "method": "apply",
				"result": map[string]any{"kind": "ConfigMap", "metadata": map[string]any{"name": "kubeconfig", "namespace": "ns"}},
				"diff":   map[string]any{"before": map[string]any{}, "after": map[string]any{"data": map[string]any{"config": "users:\n- user:\n    client-key-data: " + secret}}}},
			map[string]any{"changed": true, "method": "apply",
				"result": map[string]any{"kind": "ClusterRole", "metadata": map[string]any{"name": "karmada-reader"}},
				"diff":   map[string]any{"before": map[string]any{}, "after": map[string]any{"rules": []any{map[string]any{"verbs": []any{"get"}}}}}},
		}},
	}
	redact := NewRedactor(nil)
	read := func(v map[string]any) []changeDetail {
		v["action"] = "kubernetes.core.k8s"
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return changesOf(raw, redact)
	}

	one := read(deployment)
	if len(one) != 1 || one[0].Item != "Deployment karmada-system/karmada-apiserver" || one[0].State != "present" {
		t.Fatalf("the Deployment's change: %+v", one)
	}
	want := "-spec.replicas: 1\n+spec.replicas: 2\n" +
		"-spec.template.spec.containers[0].command[1]: --max-requests-inflight=300\n+spec.template.spec.containers[0].command[1]: --max-requests-inflight=400"
	if one[0].Diff != want {
		t.Errorf("the Deployment's diff:\n%s\nwant\n%s", one[0].Diff, want)
	}

	many := read(several)
	items := []string{}
	for _, d := range many {
		items = append(items, d.Item)
		if strings.Contains(d.Diff, secret) || strings.Contains(d.Diff, "b2xk") {
			t.Errorf("%s shows secret data: %q", d.Item, d.Diff)
		}
	}
	if strings.Join(items, ", ") != "Secret ns/karmada-cert, ConfigMap ns/kubeconfig, ClusterRole karmada-reader" {
		t.Errorf("the objects of a task that applies several: %v", items)
	}
	if len(many) == 3 {
		if many[0].Diff != "(not shown: a Secret's data)" || many[1].Diff != "(not shown: the content holds secret material)" ||
			many[2].Diff != "+rules[0].verbs[0]: get" {
			t.Errorf("the diffs: %q", []string{many[0].Diff, many[1].Diff, many[2].Diff})
		}
	}
}
