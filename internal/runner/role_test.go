package runner

import "testing"

func TestRoleOf(t *testing.T) {
	for _, tc := range []struct {
		// path and name are the task's as the jsonl callback reports them.
		path, name string
		// want is the role the task is counted under.
		want string
	}{
		{"/opt/kao/roles/kao_etcd/tasks/main.yml:12", "kao_etcd : Etcd | Start", "kao_etcd"},
		// A role's tasks in an included file.
		{"/opt/kao/roles/kao_members/tasks/push.yml:3", "kao_members : Members | Join", "kao_members"},
		// A user role outside a roles/ directory: the name's prefix names it.
		{"/var/lib/kao/user-roles/abc/site_hardening/tasks/main.yml:1", "site_hardening : Harden | sysctl", "site_hardening"},
		// A play's own task.
		{"/opt/kao/playbooks/install.yml:40", "Validate | Inputs", ""},
		// A task name that only looks like a prefix.
		{"/opt/kao/playbooks/install.yml:41", "Check | a : b", ""},
		{"", "", ""},
	} {
		if got := roleOf(tc.path, tc.name); got != tc.want {
			t.Errorf("roleOf(%q, %q) = %q, want %q", tc.path, tc.name, got, tc.want)
		}
	}
}
