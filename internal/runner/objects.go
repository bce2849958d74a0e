package runner

import (
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
)

// A task of kubernetes.core.k8s applies one object or several to a
// Kubernetes API (a Containerized control plane's workloads in its host
// cluster). In check mode the module applies them as a server-side dry run:
// the API server says what the object would become, and nothing is stored.
// Its result names the object it applied, or lists one result per object;
// with diffs, each has the fields that differ, before and after. Each
// changed object is a change of its own, named "Kind namespace/name".

// isObjectModule tells whether action applies Kubernetes objects.
func isObjectModule(action string) bool {
	return path.Ext("." + action)[1:] == "k8s"
}

// objectResult is one object's part of a kubernetes.core.k8s result.
type objectResult struct {
	Changed bool            `json:"changed"`
	Method  string          `json:"method"`
	Result  json.RawMessage `json:"result"`
	Diff    json.RawMessage `json:"diff"`
}

// objectMeta is what names an object.
type objectMeta struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	// Results are the results of a task that applied several objects.
	Results []objectResult `json:"results"`
}

// objectDetails lists the objects a changed kubernetes.core.k8s result (or
// loop item) changed, each with its fields' diff.
func objectDetails(r *changedResult, host, action string, redact *Redactor) []changeDetail {
	one := objectResult{Changed: r.Changed, Method: r.Method, Result: r.Result, Diff: r.Diff}
	list := []objectResult{one}
	meta := objectMeta{}
	if json.Unmarshal(r.Result, &meta) == nil && meta.Results != nil {
		list = meta.Results
	}
	var out []changeDetail
	for _, o := range list {
		if !o.Changed {
			continue
		}
		m := objectMeta{}
		_ = json.Unmarshal(o.Result, &m)
		name := m.Metadata.Name
		if m.Metadata.Namespace != "" {
			name = m.Metadata.Namespace + "/" + name
		}
		item := strings.TrimSpace(m.Kind + " " + name)
		if item == "" {
			item = "(unnamed object)"
		}
		state := "present"
		if o.Method == "delete" {
			state = "absent"
		}
		out = append(out, changeDetail{Host: host, Action: action, Item: redact.Clean(item, maxItemBytes),
			Diff: objectDiff(o.Diff, m.Kind, redact), State: state})
	}
	return out
}

// objectFieldsNotShown are the fields of an object that the API server
// keeps up to date itself: they differ after any write, and say nothing
// about the change.
var objectFieldsNotShown = []string{"metadata.managedFields", "metadata.resourceVersion", "metadata.generation",
	"metadata.creationTimestamp", "metadata.uid", "status"}

// objectDiff renders the fields of an object that differ, one
// "-field: before" and "+field: after" line each, with lists by index
// ("spec.template.spec.containers[0].image"). A Secret's data, and a diff
// that holds secret material, is never shown.
func objectDiff(raw json.RawMessage, kind string, redact *Redactor) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if kind == "Secret" {
		return "(not shown: a Secret's data)"
	}
	d := struct {
		Before any `json:"before"`
		After  any `json:"after"`
	}{}
	if json.Unmarshal(raw, &d) != nil {
		return ""
	}
	before, after := map[string]string{}, map[string]string{}
	var order []string
	flattenFields("", d.After, after, &order)
	flattenFields("", d.Before, before, &order)
	var b strings.Builder
	seen := map[string]bool{}
	for _, p := range order {
		if seen[p] || shownNot(p) {
			continue
		}
		seen[p] = true
		bv, inBefore := before[p]
		av, inAfter := after[p]
		if inBefore && inAfter && bv == av {
			continue
		}
		if inBefore {
			fmt.Fprintf(&b, "-%s: %s\n", p, bv)
		}
		if inAfter {
			fmt.Fprintf(&b, "+%s: %s\n", p, av)
		}
	}
	text := b.String()
	for _, m := range secretMarkers {
		if strings.Contains(strings.ToLower(text), strings.ToLower(m)) {
			return "(not shown: the content holds secret material)"
		}
	}
	text = redact.Redact(text)
	if len(text) > maxDiffBytes {
		text = text[:maxDiffBytes] + "\n... (cut)"
	}
	return strings.TrimRight(text, "\n")
}

// shownNot tells whether a field is one of objectFieldsNotShown or inside one.
func shownNot(field string) bool {
	for _, f := range objectFieldsNotShown {
		if field == f || strings.HasPrefix(field, f+".") || strings.HasPrefix(field, f+"[") {
			return true
		}
	}
	return false
}

// flattenFields records every leaf of v under its field path, and the
// paths in the order first met (a map's keys sorted, a list's by index).
func flattenFields(prefix string, v any, out map[string]string, order *[]string) {
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 && prefix != "" {
			break
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			flattenFields(p, t[k], out, order)
		}
		return
	case []any:
		if len(t) == 0 {
			break
		}
		for i, e := range t {
			flattenFields(fmt.Sprintf("%s[%d]", prefix, i), e, out, order)
		}
		return
	}
	if prefix == "" {
		return
	}
	s, ok := v.(string)
	if !ok {
		b, _ := json.Marshal(v)
		s = string(b)
	}
	out[prefix] = s
	*order = append(*order, prefix)
}
