package runner

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Change is one thing a task changed on a host, or in a check run would
// change: a task result Ansible reported as changed. What the module names
// (a file's path, a service's name) and, in a run with diffs, a short
// unified diff of a file's content come with it. A result the task hides
// (no_log) gives its task and nothing else.
type Change struct {
	// Host is the host the task changed: the host it ran for, or the one it
	// was delegated to (a role's one-host-at-a-time restart runs once and
	// is delegated to each host in turn). A task delegated to the
	// controller (localhost) counts for the host it ran for.
	Host string
	Task string
	// Role is the role the task belongs to; empty for a play's own task.
	Role string
	// Action is the module, such as ansible.builtin.template.
	Action string
	// Item is what changed, when the result says: a path, a service, a loop item's name.
	Item string
	// Diff is the change of a file's content or attributes, redacted and
	// cut to maxDiffBytes; empty when the run has no diffs or the task shows none.
	Diff string
	// Hidden is set when the task hides its result (no_log): only its name is known.
	Hidden bool
	// State is the state the task asked for, from its arguments (a
	// service's started or restarted, a file's directory or absent);
	// daemon-reload for a systemd task that only reloads units, enabled for
	// one that only enables a service. Empty when the result does not say.
	State string
}

const (
	// maxChanges bounds the changes a run keeps; the rest are counted.
	maxChanges = 500
	// maxDiffBytes bounds one change's diff.
	maxDiffBytes = 2000
	// maxDiffLines is the longest side of a content diff that is diffed
	// line by line; longer contents are summarised.
	maxDiffLines = 600
	// maxItemBytes bounds an item's name.
	maxItemBytes = 256
)

// secretMarkers are strings that show content to be secret whatever a role
// says: a diff holding one is never shown.
var secretMarkers = []string{"PRIVATE KEY", "client-key-data", "token:", "password", "BEGIN OPENSSH"}

// changeDetail is what one changed result (or loop item) says, before the
// host and task are added. The relay carries these, already redacted.
type changeDetail struct {
	// Host is the inventory host a delegated task changed; empty when it
	// is the result's own host, or the controller.
	Host   string `json:"host,omitempty"`
	Action string `json:"action,omitempty"`
	Item   string `json:"item,omitempty"`
	Diff   string `json:"diff,omitempty"`
	Hidden bool   `json:"hidden,omitempty"`
	State  string `json:"state,omitempty"`
}

// changedResult holds the fields of a result that say what changed.
type changedResult struct {
	Action   string          `json:"action"`
	Changed  bool            `json:"changed"`
	NoLog    bool            `json:"_ansible_no_log"`
	Censored string          `json:"censored"`
	Dest     string          `json:"dest"`
	Path     string          `json:"path"`
	Name     string          `json:"name"`
	Item     json.RawMessage `json:"item"`
	Diff     json.RawMessage `json:"diff"`
	// ChangedPaths are the paths a module that converges many files at
	// once (kao_files) changed: each is a change of its own.
	ChangedPaths []string `json:"changed_paths"`
	Invocation   *struct {
		ModuleArgs map[string]json.RawMessage `json:"module_args"`
	} `json:"invocation"`
	Results []changedResult `json:"results"`
	// Result and Method are what kubernetes.core.k8s applied, and how
	// (objects.go).
	Result json.RawMessage `json:"result"`
	Method string          `json:"method"`
	// DelegatedTo is the inventory host a delegated result (or loop item)
	// ran on: kao's stdout callback (plugins/callback/kao_jsonl.py) adds it.
	DelegatedTo string `json:"kao_delegated_to"`
	// Relayed are the details a relayed result carries instead of the above.
	Relayed []changeDetail `json:"kao_changes"`
}

// changesOf lists what a changed result changed: one detail per changed
// loop item, or one for the result.
func changesOf(raw json.RawMessage, redact *Redactor) []changeDetail {
	res := changedResult{}
	if json.Unmarshal(raw, &res) != nil {
		return nil
	}
	if res.Relayed != nil {
		return res.Relayed
	}
	if !res.Changed {
		return nil
	}
	action := res.Action
	if res.NoLog || res.Censored != "" {
		return []changeDetail{{Host: delegatedHost(&res, nil, redact), Action: action, Hidden: true}}
	}
	out := []changeDetail{}
	for i := range res.Results {
		r := &res.Results[i]
		if !r.Changed {
			continue
		}
		if r.NoLog || r.Censored != "" {
			out = append(out, changeDetail{Host: delegatedHost(r, &res, redact), Action: action, Hidden: true})
			continue
		}
		out = append(out, detailsOf(r, &res, action, redact)...)
	}
	if len(res.Results) > 0 {
		return out
	}
	return detailsOf(&res, nil, action, redact)
}

// detailsOf lists what one changed result (or loop item, of the task loop)
// changed: each of its changed paths with that path's part of the diff, or
// the result as a whole.
func detailsOf(r, loop *changedResult, action string, redact *Redactor) []changeDetail {
	state := stateOf(r, loop)
	host := delegatedHost(r, loop, redact)
	if isObjectModule(action) {
		return objectDetails(r, host, action, redact)
	}
	if len(r.ChangedPaths) == 0 {
		return []changeDetail{{Host: host, Action: action, Item: redact.Clean(itemOf(r), maxItemBytes), Diff: renderDiff(r.Diff, redact), State: state}}
	}
	var entries []json.RawMessage
	if json.Unmarshal(r.Diff, &entries) != nil {
		entries = nil
	}
	out := make([]changeDetail, 0, len(r.ChangedPaths))
	for _, p := range r.ChangedPaths {
		var mine []json.RawMessage
		for _, e := range entries {
			h := struct {
				Before string `json:"before_header"`
				After  string `json:"after_header"`
			}{}
			if json.Unmarshal(e, &h) == nil && (h.Before == p || h.After == p) {
				mine = append(mine, e)
			}
		}
		diff := ""
		if len(mine) > 0 {
			raw, err := json.Marshal(mine)
			if err == nil {
				diff = renderDiff(raw, redact)
			}
		}
		out = append(out, changeDetail{Host: host, Action: action, Item: redact.Clean(p, maxItemBytes), Diff: diff, State: state})
	}
	return out
}

// delegatedHost is the inventory host a delegated result (or loop item, or
// the loop it belongs to) changed; "" for a task not delegated, or
// delegated to the controller, whose changes count for the host the task
// ran for (a certificate issued for it, say).
func delegatedHost(r, loop *changedResult, redact *Redactor) string {
	host := ""
	for _, res := range []*changedResult{loop, r} {
		if res != nil && res.DelegatedTo != "" {
			host = res.DelegatedTo
		}
	}
	switch host {
	case "localhost", "127.0.0.1", "::1":
		return ""
	}
	return redact.Clean(host, maxItemBytes)
}

// stateOf is the state a result's task asked for (see Change.State): its
// own arguments, else those of the task whose loop it belongs to.
func stateOf(r, loop *changedResult) string {
	args := map[string]json.RawMessage{}
	if loop != nil && loop.Invocation != nil {
		args = loop.Invocation.ModuleArgs
	}
	if r.Invocation != nil {
		args = r.Invocation.ModuleArgs
	}
	if s := rawString(args["state"]); s != "" && s != "null" {
		return s
	}
	if string(args["daemon_reload"]) == "true" {
		return "daemon-reload"
	}
	if string(args["enabled"]) == "true" {
		return "enabled"
	}
	return ""
}

// itemOf names what a result changed: its path or name, or a loop item's.
func itemOf(r *changedResult) string {
	for _, s := range []string{r.Dest, r.Path, r.Name} {
		if s != "" {
			return s
		}
	}
	if r.Invocation != nil {
		for _, k := range []string{"dest", "path", "name"} {
			if s := rawString(r.Invocation.ModuleArgs[k]); s != "" {
				return s
			}
		}
	}
	if len(r.Item) > 0 {
		var item map[string]json.RawMessage
		if json.Unmarshal(r.Item, &item) == nil {
			for _, k := range []string{"dest", "path", "name", "src"} {
				if s := rawString(item[k]); s != "" {
					return s
				}
			}
			return ""
		}
		return rawString(r.Item)
	}
	return ""
}

// diffEntry is one entry of a result's diff: file content before and after
// (strings), attributes (objects), or text a module prepared.
type diffEntry struct {
	Before       json.RawMessage `json:"before"`
	After        json.RawMessage `json:"after"`
	BeforeHeader string          `json:"before_header"`
	AfterHeader  string          `json:"after_header"`
	Prepared     string          `json:"prepared"`
}

// renderDiff turns a result's diff (one entry or a list) into short text:
// content as a unified diff, attributes as "key: before -> after" lines.
// A diff that holds secret material is replaced by a note.
func renderDiff(raw json.RawMessage, redact *Redactor) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var entries []diffEntry
	if json.Unmarshal(raw, &entries) != nil {
		one := diffEntry{}
		if json.Unmarshal(raw, &one) != nil {
			return ""
		}
		entries = []diffEntry{one}
	}
	var b strings.Builder
	for _, e := range entries {
		switch {
		case e.Prepared != "":
			b.WriteString(strings.TrimRight(e.Prepared, "\n") + "\n")
		default:
			var before, after string
			if json.Unmarshal(e.Before, &before) == nil && json.Unmarshal(e.After, &after) == nil {
				b.WriteString(unifiedDiff(before, after))
				continue
			}
			b.WriteString(attributeDiff(e.Before, e.After))
		}
	}
	text := b.String()
	for _, m := range secretMarkers {
		if strings.Contains(strings.ToLower(text), strings.ToLower(m)) {
			return "(not shown: the content holds secret material)"
		}
	}
	cleaned := redact.Redact(text)
	if len(cleaned) > maxDiffBytes {
		cleaned = cleaned[:maxDiffBytes] + "\n... (cut)"
	}
	return strings.TrimRight(cleaned, "\n")
}

// attributeDiff renders a diff of attributes, such as a file's mode or a
// service's state, one "key: before -> after" line per differing key.
func attributeDiff(beforeRaw, afterRaw json.RawMessage) string {
	before, after := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	_ = json.Unmarshal(beforeRaw, &before)
	_ = json.Unmarshal(afterRaw, &after)
	keys := map[string]bool{}
	for k := range before {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		if k != "path" {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		bv, av := rawString(before[k]), rawString(after[k])
		if bv != av {
			if bv == "" {
				bv = "(none)"
			}
			fmt.Fprintf(&b, "%s: %s -> %s\n", k, bv, av)
		}
	}
	return b.String()
}

// unifiedDiff is a unified diff of two texts with one line of context, or
// a summary when either is too long to diff here.
func unifiedDiff(before, after string) string {
	if before == after {
		return ""
	}
	a, b := splitLines(before), splitLines(after)
	if len(a) > maxDiffLines || len(b) > maxDiffLines {
		return fmt.Sprintf("content differs (%d lines before, %d after)\n", len(a), len(b))
	}
	// lcs[i][j] is the length of the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var ops []line
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, line{' ', a[i]})
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, line{'-', a[i]})
			i++
		default:
			ops = append(ops, line{'+', b[j]})
			j++
		}
	}
	// Keep the changed lines and one line of context around each.
	keep := make([]bool, len(ops))
	for k, o := range ops {
		if o.op != ' ' {
			for c := max(k-1, 0); c <= min(k+1, len(ops)-1); c++ {
				keep[c] = true
			}
		}
	}
	var out strings.Builder
	gap := false
	for k, o := range ops {
		if !keep[k] {
			gap = true
			continue
		}
		if gap && out.Len() > 0 {
			out.WriteString("@@\n")
		}
		gap = false
		out.WriteByte(o.op)
		out.WriteString(o.text)
		out.WriteByte('\n')
	}
	return out.String()
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}
