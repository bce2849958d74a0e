package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// maxIncludeDepth stops runaway recursion through imports that include themselves.
const maxIncludeDepth = 16

// EstimateResults counts the task results a playbook will produce against an
// inventory, before it runs, so progress has a denominator: for every play,
// the tasks it runs (expanding static imports, roles with their dependencies
// and includes of literal files) times the hosts its pattern matches. Skipped
// tasks count, because Ansible reports them too; handlers, rescue blocks and
// includes of templated files do not. Asking ansible-playbook --list-tasks
// instead would cost a second Python start-up on every run.
//
// groups maps every inventory group, "all" included, to its hosts. With tags
// (a run with --tags), plays tagged with none of them nor always count
// nothing; tags on tasks inside the plays are not looked at.
func EstimateResults(playbook string, rolesPath []string, groups map[string][]string, tags []string) (int, error) {
	e := &estimator{rolesPath: rolesPath, groups: groups, tags: tags}
	return e.playbook(playbook, 0)
}

type estimator struct {
	rolesPath []string
	groups    map[string][]string
	tags      []string
}

// selects tells whether a run with e.tags runs a play with these tags.
func (e *estimator) selects(playTags any) bool {
	if len(e.tags) == 0 {
		return true
	}
	for _, t := range asList(playTags) {
		if s, ok := t.(string); ok && (s == "always" || slices.Contains(e.tags, s)) {
			return true
		}
	}
	return false
}

// taskCount splits a task list's results into those every host produces and
// those produced once per play (run_once).
type taskCount struct {
	perHost int
	once    int
}

func (c *taskCount) add(o taskCount) {
	c.perHost += o.perHost
	c.once += o.once
}

func (e *estimator) playbook(path string, depth int) (int, error) {
	if depth > maxIncludeDepth {
		return 0, fmt.Errorf("playbook imports nest deeper than %d levels at %s", maxIncludeDepth, path)
	}
	var plays []map[string]any
	if err := readYAML(path, &plays); err != nil {
		return 0, err
	}
	dir := filepath.Dir(path)
	total := 0
	for _, play := range plays {
		if imp, ok := firstString(play, "import_playbook", "ansible.builtin.import_playbook"); ok {
			if !filepath.IsAbs(imp) {
				imp = filepath.Join(dir, imp)
			}
			n, err := e.playbook(imp, depth+1)
			if err != nil {
				return 0, err
			}
			total += n
			continue
		}
		hosts := len(e.matchHosts(play["hosts"]))
		if hosts == 0 || !e.selects(play["tags"]) {
			continue
		}
		c := taskCount{}
		if b, ok := play["gather_facts"].(bool); ok && b {
			c.perHost++
		}
		c.add(e.tasks(play["pre_tasks"], dir, dir, depth))
		for _, r := range asList(play["roles"]) {
			c.add(e.role(roleName(r), "main", depth))
		}
		c.add(e.tasks(play["tasks"], dir, dir, depth))
		c.add(e.tasks(play["post_tasks"], dir, dir, depth))
		total += c.perHost*hosts + c.once
	}
	return total, nil
}

// tasks counts the results of a task list. dir resolves relative imports;
// playDir is the playbook's directory, whose roles/ directory holds roles too.
func (e *estimator) tasks(list any, dir, playDir string, depth int) taskCount {
	c := taskCount{}
	if depth > maxIncludeDepth {
		return c
	}
	for _, item := range asList(list) {
		task, ok := item.(map[string]any)
		if !ok {
			continue
		}
		if block, ok := task["block"]; ok {
			c.add(e.tasks(block, dir, playDir, depth))
			c.add(e.tasks(task["always"], dir, playDir, depth))
			continue
		}
		if file, ok := firstString(task, "import_tasks", "ansible.builtin.import_tasks"); ok {
			c.add(e.taskFile(filepath.Join(dir, file), playDir, depth+1))
			continue
		}
		if spec, ok := firstValue(task, "import_role", "ansible.builtin.import_role"); ok {
			name, from := roleRef(spec)
			c.add(e.role(name, from, depth+1))
			continue
		}
		one := taskCount{perHost: 1}
		if once, _ := task["run_once"].(bool); once {
			one = taskCount{once: 1}
		}
		c.add(one)
		// Dynamic includes report a result of their own, then their tasks.
		if file, ok := firstString(task, "include_tasks", "ansible.builtin.include_tasks"); ok && !strings.Contains(file, "{{") {
			c.add(e.taskFile(filepath.Join(dir, file), playDir, depth+1))
		}
		if spec, ok := firstValue(task, "include_role", "ansible.builtin.include_role"); ok {
			name, from := roleRef(spec)
			c.add(e.role(name, from, depth+1))
		}
	}
	return c
}

func (e *estimator) taskFile(path, playDir string, depth int) taskCount {
	var list []any
	if err := readYAML(path, &list); err != nil {
		return taskCount{}
	}
	return e.tasks(list, filepath.Dir(path), playDir, depth)
}

// role counts a role's dependencies and its tasks file (main unless tasks_from says otherwise).
func (e *estimator) role(name, tasksFrom string, depth int) taskCount {
	c := taskCount{}
	if name == "" || strings.Contains(name, "{{") || depth > maxIncludeDepth {
		return c
	}
	dir := e.findRole(name)
	if dir == "" {
		return c
	}
	meta := map[string]any{}
	if readYAML(filepath.Join(dir, "meta", "main.yml"), &meta) == nil {
		for _, dep := range asList(meta["dependencies"]) {
			c.add(e.role(roleName(dep), "main", depth+1))
		}
	}
	if tasksFrom == "" {
		tasksFrom = "main"
	}
	file := filepath.Join(dir, "tasks", tasksFrom)
	if filepath.Ext(file) == "" {
		file += ".yml"
	}
	c.add(e.taskFile(file, dir, depth+1))
	return c
}

func (e *estimator) findRole(name string) string {
	for _, p := range e.rolesPath {
		dir := filepath.Join(p, name)
		if st, err := os.Stat(filepath.Join(dir, "tasks")); err == nil && st.IsDir() {
			return dir
		}
	}
	return ""
}

// matchHosts resolves a play's host pattern against the inventory: group and
// host names joined by ',' or ':', with '!' excluding and '&' intersecting.
// A templated pattern is taken to mean every host.
func (e *estimator) matchHosts(pattern any) []string {
	terms := []string{}
	switch p := pattern.(type) {
	case string:
		if strings.Contains(p, "{{") {
			return e.groups["all"]
		}
		terms = strings.FieldsFunc(p, func(r rune) bool { return r == ',' || r == ':' })
	case []any:
		for _, t := range p {
			if s, ok := t.(string); ok {
				terms = append(terms, s)
			}
		}
	}
	selected, excluded := map[string]bool{}, map[string]bool{}
	var intersect []map[string]bool
	for _, raw := range terms {
		term := strings.TrimSpace(raw)
		switch {
		case strings.HasPrefix(term, "!"):
			for _, h := range e.resolve(term[1:]) {
				excluded[h] = true
			}
		case strings.HasPrefix(term, "&"):
			set := map[string]bool{}
			for _, h := range e.resolve(term[1:]) {
				set[h] = true
			}
			intersect = append(intersect, set)
		default:
			for _, h := range e.resolve(term) {
				selected[h] = true
			}
		}
	}
	out := []string{}
	for h := range selected {
		keep := !excluded[h]
		for _, set := range intersect {
			keep = keep && set[h]
		}
		if keep {
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return out
}

func (e *estimator) resolve(term string) []string {
	if term == "all" || term == "*" {
		return e.groups["all"]
	}
	if hosts, ok := e.groups[term]; ok {
		return hosts
	}
	for _, h := range e.groups["all"] {
		if h == term {
			return []string{h}
		}
	}
	if term == "localhost" || term == "127.0.0.1" {
		return []string{term} // Ansible's implicit localhost
	}
	return nil
}

func readYAML(path string, out any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, out); err != nil {
		return fmt.Errorf("parsing %s: %w", path, err)
	}
	return nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func firstValue(m map[string]any, keys ...string) (any, bool) {
	for _, k := range keys {
		if v, ok := m[k]; ok {
			return v, true
		}
	}
	return nil, false
}

func firstString(m map[string]any, keys ...string) (string, bool) {
	v, ok := firstValue(m, keys...)
	if !ok {
		return "", false
	}
	switch s := v.(type) {
	case string:
		return s, true
	case map[string]any: // import_tasks: {file: x.yml}
		f, ok := s["file"].(string)
		return f, ok
	}
	return "", false
}

// roleName reads a play's roles entry: a name, or a map with role or name.
func roleName(v any) string {
	name, _ := roleRef(v)
	return name
}

// roleRef reads an import_role or include_role argument: its name and tasks_from.
func roleRef(v any) (name, tasksFrom string) {
	switch r := v.(type) {
	case string:
		return r, ""
	case map[string]any:
		for _, k := range []string{"role", "name"} {
			if s, ok := r[k].(string); ok {
				name = s
				break
			}
		}
		tasksFrom, _ = r["tasks_from"].(string)
	}
	return name, tasksFrom
}
