package badinput

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/kao-io/kao/internal/testenv"
)

// loadRole reads a Role or ClusterRole manifest of config/.
func loadRole(t *testing.T, rel string) (kind string, rules []rbacv1.PolicyRule) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), rel))
	if err != nil {
		t.Fatal(err)
	}
	var role struct {
		Kind  string              `json:"kind"`
		Rules []rbacv1.PolicyRule `json:"rules"`
	}
	if err := yaml.Unmarshal(data, &role); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return role.Kind, role.Rules
}

// operatorUser binds the Role of config/rbac-namespaced in ns to a new user
// of the API server and returns that user's client configuration: the
// operator under test can do in ns exactly what the Role allows, and
// nothing anywhere else.
func operatorUser(t *testing.T, ns string) *rest.Config {
	t.Helper()
	kind, rules := loadRole(t, "config/rbac-namespaced/role.yaml")
	if kind != "Role" {
		t.Fatalf("config/rbac-namespaced/role.yaml is a %s, want a Role", kind)
	}
	ctx := context.Background()
	name := "kao-manager"
	role := &rbacv1.Role{}
	role.Name, role.Namespace, role.Rules = name, ns, rules
	if err := k8s.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	user := "kao-operator-" + ns
	binding := &rbacv1.RoleBinding{
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	binding.Name, binding.Namespace = name, ns
	if err := k8s.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	u, err := env.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return u.Config()
}

// TestRBACIsLeastPrivilege checks the manager's rules as written: no
// wildcard anywhere, no verb the controllers do not use on a kind, no
// cluster-scoped kind, and the namespaced Role the same rules as the
// ClusterRole. That the rules are enough is what the corpus proves: its
// operator runs with nothing else (operatorUser).
func TestRBACIsLeastPrivilege(t *testing.T) {
	kind, cluster := loadRole(t, "config/rbac/role.yaml")
	if kind != "ClusterRole" {
		t.Fatalf("config/rbac/role.yaml is a %s, want a ClusterRole", kind)
	}
	if _, namespaced := loadRole(t, "config/rbac-namespaced/role.yaml"); !slices.EqualFunc(cluster, namespaced, rulesEqual) {
		t.Errorf("config/rbac-namespaced/role.yaml differs from config/rbac/role.yaml: run make manifests")
	}
	// What kao may do, by group/resource: anything beyond fails the test.
	allowed := map[string][]string{
		"/configmaps":                          {"create", "delete", "get", "list", "watch"},
		"/secrets":                             {"create", "get", "update"},
		"events.k8s.io/events":                 {"create", "patch"},
		"kao.io/karmadadeployments":            {"get", "list", "patch", "update", "watch"},
		"kao.io/karmadadeployments/status":     {"get", "patch", "update"},
		"kao.io/karmadadeployments/finalizers": {"get", "patch", "update"},
		"kao.io/etcdbackups":                   {"get", "list", "watch"},
		"kao.io/etcdbackups/status":            {"get", "patch", "update"},
		"kao.io/etcdrestores":                  {"get", "list", "patch", "update", "watch"},
		"kao.io/etcdrestores/status":           {"get", "patch", "update"},
		"kao.io/etcdrestores/finalizers":       {"get", "patch", "update"},
	}
	checkRules(t, "config/rbac/role.yaml", cluster, allowed)
	// The Job executor's rules, added only with --executor=job.
	kind, jobs := loadRole(t, "config/rbac-job-executor/role.yaml")
	if kind != "ClusterRole" {
		t.Fatalf("config/rbac-job-executor/role.yaml is a %s, want a ClusterRole", kind)
	}
	checkRules(t, "config/rbac-job-executor/role.yaml", jobs, map[string][]string{
		"batch/jobs": {"create", "delete", "get"},
		"/secrets":   {"create", "delete"},
		"/pods":      {"list"},
		"/pods/log":  {"get"},
	})
}

// checkRules fails on a rule of file that allows more than allowed, by
// group/resource, or has a wildcard.
func checkRules(t *testing.T, file string, rules []rbacv1.PolicyRule, allowed map[string][]string) {
	t.Helper()
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
			t.Errorf("%s: unexpected rule shape: %+v", file, r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				key := g + "/" + res
				if g == "*" || res == "*" || strings.Contains(key, "*") {
					t.Errorf("%s: a wildcard in %s", file, key)
				}
				for _, v := range r.Verbs {
					if !slices.Contains(allowed[key], v) {
						t.Errorf("%s: %s may %s: kao does not need that", file, key, v)
					}
				}
			}
		}
	}
}

func rulesEqual(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.Verbs, b.Verbs) && slices.Equal(a.ResourceNames, b.ResourceNames)
}
