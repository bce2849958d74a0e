package karmadadeployment

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/runner"
	"github.com/kao-io/kao/internal/testenv"
)

func TestConfigMapRolePath(t *testing.T) {
	tests := []struct {
		// key is the ConfigMap key.
		key string
		// want is the path inside the role; empty means refused.
		want string
	}{
		{key: "tasks__main.yml", want: "tasks/main.yml"},
		{key: "templates__motd.j2", want: "templates/motd.j2"},
		{key: "files__etc__issue.net", want: "files/etc/issue.net"},
		{key: "defaults__main.yaml", want: "defaults/main.yaml"},
		{key: "main.yml"},                             // not inside a role directory
		{key: "tasks__..__..__etc__passwd"},           // traversal
		{key: "__etc__passwd"},                        // absolute
		{key: "tasks____main.yml"},                    // an empty part
		{key: "tasks__.hidden.yml"},                   // hidden
		{key: "tasks___main.yml"},                     // a part starting with '_'
		{key: "library__evil.py"},                     // a module runs inside the operator
		{key: "filter_plugins__evil.py"},              // so does a plugin
		{key: "tasks__a__b__c__d__e__f__g__h__i.yml"}, // too deep
	}
	for _, tc := range tests {
		got, err := configMapRolePath(tc.key)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("configMapRolePath(%q) = %q, want it refused", tc.key, got)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("configMapRolePath(%q) = %q, %v; want %q", tc.key, got, err, tc.want)
		}
	}
}

// markerRole is a ConfigMap role that writes <dir>/<stage>-<host> with a
// line of text, through a template, on every host it runs on.
func markerRole(t *testing.T, ns, name, stage, dir, text string) *corev1.ConfigMap {
	t.Helper()
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data: map[string]string{
			"defaults__main.yml":   "marker_dir: " + dir + "\nmarker_text: " + text + "\n",
			"templates__marker.j2": "{{ marker_text }} on {{ inventory_hostname }}\n",
			"tasks__main.yml": "- name: " + stage + " marker | Record the host\n" +
				"  ansible.builtin.template:\n" +
				"    src: marker.j2\n" +
				"    dest: \"{{ marker_dir }}/" + stage + "-{{ inventory_hostname }}\"\n" +
				"    mode: \"0600\"\n",
		},
	}
}

// markers lists the marker files in dir.
func markers(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestUserRolesRunOnTheirGroupsBeforeAndAfterTheInstall runs two user roles
// with the real ansible-playbook around the test install playbook: a
// ConfigMap role before the install on the members, a role from the
// operator's --user-roles-dir after it on host_cluster. Each runs on exactly
// its groups and in its stage, and a change to the ConfigMap runs again.
func TestUserRolesRunOnTheirGroupsBeforeAndAfterTheInstall(t *testing.T) {
	ctx := context.Background()
	ns := controllertest.NewNamespace(t)
	out := t.TempDir()
	rolesDir := t.TempDir()
	after := filepath.Join(rolesDir, "site", "after_marker")
	for path, content := range map[string]string{
		"defaults/main.yml": "marker_dir: " + out + "\n",
		"tasks/main.yml": "- name: after marker | Record the host\n  ansible.builtin.copy:\n" +
			"    dest: \"{{ marker_dir }}/after-{{ inventory_hostname }}\"\n    content: \"after\\n\"\n    mode: \"0600\"\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(after, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(after, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	startOperatorWith(t, ns, "", func(o *pipeline.Options) { o.ConfigMapUserRoles, o.UserRolesDir = true, rolesDir })
	cm := markerRole(t, ns, "before-marker", "before", out, "first")
	if err := controllertest.K8s.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	kd := newDeploymentWith(t, ns, "roles", func(kd *kaov1.KarmadaDeployment) {
		kd.Spec.Addons.UserRoles = []kaov1.UserRole{
			{Name: "after_marker", Stage: kaov1.AfterInstallStage, Groups: []kaov1.InventoryGroup{"host_cluster"}, Path: after},
			{Name: "before_marker", Stage: kaov1.BeforeInstallStage, Groups: []kaov1.InventoryGroup{"members"}, ConfigMapName: cm.Name},
		}
	}, "ok-a", "ok-b")

	done := controllertest.WaitFor(t, kd, runWait, "a successful run", lastRunIs(kaov1.RunSucceeded))
	want := []string{"after-host_cluster", "before-member_ok-a", "before-member_ok-b"}
	if got := markers(t, out); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the roles ran on %v, want %v", got, want)
	}
	if data, _ := os.ReadFile(filepath.Join(out, "before-member_ok-a")); string(data) != "first on member_ok-a\n" {
		t.Errorf("the ConfigMap role's template rendered %q", data)
	}
	log := readRunLog(t, done)
	before, install, afterAt := strings.Index(log, "before marker | Record the host"), strings.Index(log, "Test | Do some work"), strings.Index(log, "after marker | Record the host")
	if before < 0 || install < 0 || afterAt < 0 || before >= install || install >= afterAt {
		t.Errorf("want the BeforeInstall role, then the install, then the AfterInstall role; positions %d, %d, %d in:\n%s", before, install, afterAt, log)
	}
	if done.Status.UserRolesDigest == "" || done.Status.LastRun.Playbook != pipeline.InstallPlaybook {
		t.Errorf("status after the run: digest %q, playbook %q", done.Status.UserRolesDigest, done.Status.LastRun.Playbook)
	}

	// The ops team edits the role: the next run needs no spec change.
	cm.Data["defaults__main.yml"] = "marker_dir: " + out + "\nmarker_text: second\n"
	if err := controllertest.K8s.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	again := controllertest.WaitFor(t, kd, runWait, "a run with the edited role", func(kd *kaov1.KarmadaDeployment) bool {
		return lastRunIs(kaov1.RunSucceeded)(kd) && kd.Status.LastRun.ID != done.Status.LastRun.ID
	})
	if again.Generation != done.Generation || again.Status.UserRolesDigest == done.Status.UserRolesDigest {
		t.Errorf("generation %d→%d, digest %q→%q: want the same generation and a new digest",
			done.Generation, again.Generation, done.Status.UserRolesDigest, again.Status.UserRolesDigest)
	}
	if data, _ := os.ReadFile(filepath.Join(out, "before-member_ok-b")); string(data) != "second on member_ok-b\n" {
		t.Errorf("the edited role wrote %q", data)
	}
	waitForEvent(t, kd, "UserRolesChanged")
}

// TestFailingBeforeInstallRoleStopsTheInstall runs a BeforeInstall role that
// fails on one member: the run fails with that host, task and message, and
// nothing of the install runs, on any host.
func TestFailingBeforeInstallRoleStopsTheInstall(t *testing.T) {
	ctx := context.Background()
	ns := controllertest.NewNamespace(t)
	startOperatorWith(t, ns, "", func(o *pipeline.Options) { o.ConfigMapUserRoles = true })
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "disk-check", Namespace: ns},
		Data: map[string]string{"tasks__main.yml": "- name: Disk check | Require free space\n  ansible.builtin.fail:\n" +
			"    msg: \"not enough free space on {{ inventory_hostname }}\"\n  when: inventory_hostname == 'member_full-b'\n"},
	}
	if err := controllertest.K8s.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	kd := newDeploymentWith(t, ns, "stopped", func(kd *kaov1.KarmadaDeployment) {
		kd.Spec.Addons.UserRoles = []kaov1.UserRole{
			{Name: "disk_check", Stage: kaov1.BeforeInstallStage, Groups: []kaov1.InventoryGroup{"members"}, ConfigMapName: cm.Name},
		}
	}, "ok-a", "full-b")

	failed := controllertest.WaitFor(t, kd, runWait, "a failed run", lastRunIs(kaov1.RunFailed))
	last := failed.Status.LastRun
	found := false
	for _, f := range last.FailedTasks {
		found = found || f.Host == "member_full-b" && f.Task == "disk_check : Disk check | Require free space" && f.Message == "not enough free space on member_full-b"
	}
	if !found {
		t.Errorf("lastRun does not name the failed user role task: %+v", last.FailedTasks)
	}
	if c := condition(failed, kaov1.PlaybookSucceededCondition); c == nil || c.Status != metav1.ConditionFalse || c.Reason != kaov1.RunFailedReason {
		t.Errorf("PlaybookSucceeded: %+v", c)
	}
	if log := readRunLog(t, failed); strings.Contains(log, "Test | ") {
		t.Errorf("the install ran after a failed BeforeInstall role:\n%s", log)
	}
}

// TestUnusableUserRolesAreConditionsAndNothingRuns gives deployments roles
// that must not run: each gets PlaybookSucceeded=False with reason
// UserRoleInvalid and a message naming the problem, a Warning Event, and no
// run.
func TestUnusableUserRolesAreConditionsAndNothingRuns(t *testing.T) {
	ctx := context.Background()
	ns := controllertest.NewNamespace(t)
	rolesDir := t.TempDir()
	outside := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A role holding a symbolic link to a file outside it, and a role
	// directory that is itself a link to a directory outside the root.
	write(filepath.Join(rolesDir, "linked", "tasks", "main.yml"), "[]\n")
	if err := os.Symlink("/etc/hostname", filepath.Join(rolesDir, "linked", "files-hostname")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(outside, "escape", "tasks", "main.yml"), "[]\n")
	if err := os.Symlink(filepath.Join(outside, "escape"), filepath.Join(rolesDir, "escape")); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(outside, "elsewhere", "tasks", "main.yml"), "[]\n")
	repoRoles, _ := filepath.Abs(filepath.Join(testenv.RepoRoot(), "roles"))
	startOperatorWith(t, ns, "", func(o *pipeline.Options) {
		o.ConfigMapUserRoles, o.UserRolesDir, o.RolesPath = true, rolesDir, []string{repoRoles}
	})
	for name, data := range map[string]map[string]string{
		"traversal":  {"tasks__main.yml": "[]\n", "tasks__..__..__escape.yml": "[]\n"},
		"module":     {"tasks__main.yml": "[]\n", "library__evil.py": "print('hi')\n"},
		"no-tasks":   {"defaults__main.yml": "x: 1\n"},
		"named-etcd": {"tasks__main.yml": "[]\n"},
	} {
		if err := controllertest.K8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		// name names the deployment.
		name string
		// role is its only user role.
		role kaov1.UserRole
		// want is part of the condition's message.
		want string
	}{
		{name: "missing", role: kaov1.UserRole{Name: "gone", ConfigMapName: "does-not-exist"}, want: "does-not-exist named in spec.addons.userRoles[0].configMapName does not exist"},
		{name: "traversal", role: kaov1.UserRole{Name: "trav", ConfigMapName: "traversal"}, want: `".." is not a plain file or directory name`},
		{name: "module", role: kaov1.UserRole{Name: "mod", ConfigMapName: "module"}, want: "may fill only"},
		{name: "no-tasks", role: kaov1.UserRole{Name: "empty", ConfigMapName: "no-tasks"}, want: "has no tasks/main.yml"},
		{name: "kao-name", role: kaov1.UserRole{Name: "etcd", ConfigMapName: "named-etcd"}, want: `"etcd" is the name of one of kao's roles`},
		{name: "outside", role: kaov1.UserRole{Name: "elsewhere", Path: filepath.Join(outside, "elsewhere")}, want: "is outside the operator's user roles directory"},
		{name: "symlink-dir", role: kaov1.UserRole{Name: "escape", Path: filepath.Join(rolesDir, "escape")}, want: "through a symbolic link"},
		{name: "symlink-file", role: kaov1.UserRole{Name: "linked", Path: filepath.Join(rolesDir, "linked")}, want: "files-hostname is a symbolic link"},
		{name: "absent", role: kaov1.UserRole{Name: "absent", Path: filepath.Join(rolesDir, "absent")}, want: "does not exist in the operator's filesystem"},
	}
	deployments := map[string]*kaov1.KarmadaDeployment{}
	for _, tc := range tests {
		tc.role.Stage, tc.role.Groups = kaov1.BeforeInstallStage, []kaov1.InventoryGroup{"members"}
		deployments[tc.name] = newDeploymentWith(t, ns, tc.name, func(kd *kaov1.KarmadaDeployment) {
			kd.Spec.Addons.UserRoles = []kaov1.UserRole{tc.role}
		}, "ok-a")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kd := deployments[tc.name]
			cur := controllertest.WaitFor(t, kd, 30*time.Second, "the UserRoleInvalid condition", func(kd *kaov1.KarmadaDeployment) bool {
				c := condition(kd, kaov1.PlaybookSucceededCondition)
				return c != nil && c.Reason == kaov1.UserRoleInvalidReason
			})
			c := condition(cur, kaov1.PlaybookSucceededCondition)
			if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, tc.want) {
				t.Errorf("PlaybookSucceeded is %s %q, want False with %q", c.Status, c.Message, tc.want)
			}
			ev := waitForEvent(t, kd, kaov1.UserRoleInvalidReason)
			if ev.Type != corev1.EventTypeWarning || ev.Note != c.Message {
				t.Errorf("the Event is %s %q, want a Warning with the condition's message", ev.Type, ev.Note)
			}
			if cur.Status.LastRun != nil || cur.Status.Progress != nil || cur.Status.Certificates != nil {
				t.Errorf("something ran or was issued: lastRun %+v, progress %+v, %d certificates", cur.Status.LastRun, cur.Status.Progress, len(cur.Status.Certificates))
			}
			for _, e := range controllertest.DeploymentEvents(t, kd) {
				if e.Reason == "PlaybookStarted" {
					t.Errorf("a run started: %s", e.Note)
				}
			}
		})
	}

	// An operator that was not allowed ConfigMap roles refuses them.
	ns2 := controllertest.NewNamespace(t)
	startOperator(t, ns2, "")
	if err := controllertest.K8s.Create(ctx, markerRole(t, ns2, "allowed-nowhere", "before", t.TempDir(), "x")); err != nil {
		t.Fatal(err)
	}
	kd := newDeploymentWith(t, ns2, "not-allowed", func(kd *kaov1.KarmadaDeployment) {
		kd.Spec.Addons.UserRoles = []kaov1.UserRole{{Name: "marker", Stage: kaov1.AfterInstallStage,
			Groups: []kaov1.InventoryGroup{"members"}, ConfigMapName: "allowed-nowhere"}}
	}, "ok-a")
	refused := controllertest.WaitFor(t, kd, 30*time.Second, "the UserRoleInvalid condition", func(kd *kaov1.KarmadaDeployment) bool {
		c := condition(kd, kaov1.PlaybookSucceededCondition)
		return c != nil && c.Reason == kaov1.UserRoleInvalidReason
	})
	if c := condition(refused, kaov1.PlaybookSucceededCondition); !strings.Contains(c.Message, "--configmap-user-roles") || refused.Status.LastRun != nil {
		t.Errorf("PlaybookSucceeded %q, lastRun %+v: want a refusal naming --configmap-user-roles and no run", c.Message, refused.Status.LastRun)
	}
}

// TestUserRolesPlaybookMatchesGoldenAndParses renders the playbook of two
// roles around an install playbook, compares it with
// testdata/user-roles-playbook.golden.yml (KAO_UPDATE_GOLDEN=1 rewrites it),
// and has ansible-playbook check its syntax with the roles in place.
func TestUserRolesPlaybookMatchesGoldenAndParses(t *testing.T) {
	roles := []userRole{
		{spec: kaov1.UserRole{Name: "motd", Stage: kaov1.AfterInstallStage, Groups: []kaov1.InventoryGroup{"karmada_control_plane"}},
			files: []runner.File{{Path: "tasks/main.yml", Data: []byte("- name: Motd | Say hello\n  ansible.builtin.debug:\n    msg: hello\n")}}},
		{spec: kaov1.UserRole{Name: "disk_space", Stage: kaov1.BeforeInstallStage, Groups: []kaov1.InventoryGroup{"etcd", "karmada_apiserver"}},
			files: []runner.File{{Path: "tasks/main.yml", Data: []byte("- name: Disk space | Check\n  ansible.builtin.debug:\n    msg: ok\n")}}},
	}
	dir := t.TempDir()
	install := filepath.Join(dir, "kao", "install.yml")
	ur, err := buildUserRolesRun(roles, install)
	if err != nil {
		t.Fatal(err)
	}
	var playbook []byte
	for _, f := range ur.files {
		if f.Path == filepath.FromSlash(userRolesPlaybook) {
			playbook = f.Data
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f.Path)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.Path), f.Data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	golden := filepath.Join("testdata", "user-roles-playbook.golden.yml")
	rendered := []byte(strings.ReplaceAll(string(playbook), install, "/opt/kao/playbooks/install.yml"))
	if os.Getenv("KAO_UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(golden, rendered, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(rendered) != string(want) {
		t.Errorf("the user roles playbook differs from %s:\n%s", golden, rendered)
	}
	if ur.digest != userRolesDigest(roles) || !strings.HasPrefix(ur.digest, "sha256:") {
		t.Errorf("digest %q", ur.digest)
	}

	if err := os.MkdirAll(filepath.Dir(install), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(install, []byte("- name: Kao | Install\n  hosts: all\n  gather_facts: false\n  tasks: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ansible-playbook", "--syntax-check", "-i", "localhost,", filepath.Join(dir, filepath.FromSlash(userRolesPlaybook)))
	cmd.Env = append(os.Environ(), "ANSIBLE_ROLES_PATH="+filepath.Join(dir, userRolesDir), "HOME="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("ansible-playbook --syntax-check: %v\n%s", err, out)
	}
}
