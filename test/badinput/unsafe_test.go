package badinput

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ownLiterals are strings kao itself writes into the inventory with Jinja in
// them, on purpose: they never come from a CR.
var ownLiterals = map[string]bool{"{{ ansible_playbook_python }}": true}

// hostileMarkers are what makes a string dangerous to Ansible (Jinja) or to
// a shell, should a role ever pass it to one.
var hostileMarkers = []string{"{{", "{%", "{#", "$(", "${", "`", ";", "\n", "|", "&&"}

func isHostile(s string) bool {
	for _, m := range hostileMarkers {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// checkUnsafe walks an inventory (FileJSON) and fails for every hostile
// string that is not the value of an {"__ansible_unsafe": ...} marker, and
// for every string of want that no unsafe value carries.
func checkUnsafe(t *testing.T, inventoryJSON []byte, want []string) {
	t.Helper()
	var doc any
	if err := json.Unmarshal(inventoryJSON, &doc); err != nil {
		t.Fatal(err)
	}
	unsafeValues := []string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if s, ok := v["__ansible_unsafe"].(string); ok && len(v) == 1 {
				unsafeValues = append(unsafeValues, s)
				return
			}
			for k, child := range v {
				if isHostile(k) {
					t.Errorf("inventory key %q at %s is hostile", k, path)
				}
				walk(path+"."+k, child)
			}
		case []any:
			for _, child := range v {
				walk(path+"[]", child)
			}
		case string:
			if isHostile(v) && !ownLiterals[v] {
				t.Errorf("inventory %s is %q, a hostile string Ansible would template: it must be an __ansible_unsafe value", path, v)
			}
		}
	}
	walk("", doc)
	for _, w := range want {
		found := false
		for _, u := range unsafeValues {
			if strings.Contains(u, w) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no __ansible_unsafe value of the inventory carries %q", w)
		}
	}
}

// checkAnsibleLeavesStrings hands the inventory to the real ansible and has
// it print every host's variables, templated as a role would read them: each
// hostile string must come back as written, and no lookup may have run.
func checkAnsibleLeavesStrings(t *testing.T, dir string, inventoryJSON []byte, want []string) {
	t.Helper()
	inv := filepath.Join(dir, "hosts.json")
	if err := os.WriteFile(inv, inventoryJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ansible", "all", "-i", inv, "-m", "ansible.builtin.debug", "-a", "var=hostvars[inventory_hostname]")
	cmd.Env = append(os.Environ(), "ANSIBLE_STDOUT_CALLBACK=json", "ANSIBLE_LOAD_CALLBACK_PLUGINS=1",
		"ANSIBLE_LOCALHOST_WARNING=false", "ANSIBLE_INVENTORY_UNPARSED_WARNING=false", "ANSIBLE_NOCOLOR=1")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ansible all -m debug failed: %v\n%s", err, out)
	}
	text := string(out)
	if strings.Contains(text, "uid=") {
		t.Errorf("ansible ran a lookup from the inventory: its output holds uid=\n%s", text)
	}
	for _, w := range want {
		if !strings.Contains(text, jsonText(w)) {
			t.Errorf("ansible's view of the inventory lacks %q as written:\n%.4000s", w, text)
		}
	}
}

// jsonText is s as it appears inside a JSON string, as Python's json module writes it.
func jsonText(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(strings.TrimSpace(b.String()), `"`)[1:]
}
