package runner

import "testing"

func TestRoleOf(t *testing.T) {
	for _, tc := range []struct {
		// path is the task's file and line, as the jsonl callback reports it.
		path string
		// want is the role the task is counted under.
		want string
	}{
		{"/opt/kao/roles/kao_etcd/tasks/main.yml:12", "kao_etcd"},
		// A role's tasks in an included file.
		{"/opt/kao/roles/kao_members/tasks/push.yml:3", "kao_members"},
		// A user role outside a roles/ directory.
		{"/var/lib/kao/runs/u1/r1/user-roles/site_hardening/tasks/main.yml:1", "site_hardening"},
		// A play's own task.
		{"/opt/kao/playbooks/install.yml:40", ""},
		// A file named tasks is no tasks directory.
		{"/opt/kao/playbooks/tasks:4", ""},
		{"", ""},
	} {
		if got := roleOf(tc.path); got != tc.want {
			t.Errorf("roleOf(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}
