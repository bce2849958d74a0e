package karmadadeployment

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/runner"
)

const (
	// User roles (spec.addons.userRoles) are an ops team's own Ansible roles,
	// run by the install run against groups of kao's inventory. The controller
	// reads each role (from a ConfigMap, or from a directory under the
	// operator's --user-roles-dir), writes it into the run directory under
	// user-roles/<name>, and runs a generated playbook, playbook/install.yml in
	// the run directory, that runs the BeforeInstall roles, imports kao's own
	// install.yml, then runs the AfterInstall roles. Nothing a role holds is
	// templated by kao: the files are copied byte for byte, and the generated
	// playbook names only the role (a validated name) and inventory groups (an
	// enum).

	// Where a run keeps its user roles and its generated playbook, relative to
	// the run directory.
	userRolesDir = "user-roles"

	userRolesPlaybook = "playbook/" + pipeline.InstallPlaybook

	// Limits of one user role: ConfigMaps are at most 1 MiB anyway; a role
	// directory may be larger, but a role is tasks and templates, not data.
	maxUserRoleFiles = 256

	maxUserRoleBytes = 4 << 20

	maxUserRoleDepth = 8
)

// userRoleTopDirs are the role directories a ConfigMap role may fill. Module
// and plugin directories (library, *_plugins) run code inside the operator
// whatever the hosts: they come only from a role directory the operator's
// administrator put under --user-roles-dir.
var userRoleTopDirs = []string{"defaults", "files", "handlers", "meta", "tasks", "templates", "vars"}

// userRolePart is one element of a path inside a role: a file or directory
// name that starts with a letter or digit.
var userRolePart = regexp.MustCompile(`^[A-Za-z0-9][-A-Za-z0-9_.]*$`)

// userRoleErrorf is a user role that cannot be used: shown in a condition
// and a Warning Event with the reason UserRoleInvalid, and retried with
// backoff.
func userRoleErrorf(format string, args ...any) error {
	return reason.Failed(kaov1.UserRoleInvalidReason, format, args...)
}

// userRole is a user role read for a run.
type userRole struct {
	spec kaov1.UserRole
	// files are the role's files, paths relative to the role directory, sorted.
	files []runner.File
}

// configMapRolePath turns a ConfigMap key into a path inside a role ("/"
// written as "__"), or says why it is not one: every part a plain name (no
// "." or "..", nothing hidden, nothing absolute), at most maxUserRoleDepth
// deep, and inside one of userRoleTopDirs.
func configMapRolePath(key string) (string, error) {
	parts := strings.Split(key, "__")
	if len(parts) < 2 {
		return "", fmt.Errorf("key %q names no file inside a role directory: write a path such as tasks__main.yml (\"/\" as \"__\")", key)
	}
	if len(parts) > maxUserRoleDepth {
		return "", fmt.Errorf("key %q is more than %d levels deep", key, maxUserRoleDepth)
	}
	for _, p := range parts {
		if !userRolePart.MatchString(p) || p == "." || p == ".." {
			return "", fmt.Errorf("key %q: %q is not a plain file or directory name (letters, digits, '-', '_' and '.', starting with a letter or digit)", key, p)
		}
	}
	if !slices.Contains(userRoleTopDirs, parts[0]) {
		return "", fmt.Errorf("key %q: a ConfigMap role may fill only %s, not %q", key, strings.Join(userRoleTopDirs, ", "), parts[0])
	}
	return strings.Join(parts, "/"), nil
}

// loadUserRoles reads every role of spec.addons.userRoles. A role that cannot
// be used is a UserRoleInvalid *reason.Error naming its field.
func (r *Reconciler) loadUserRoles(ctx context.Context, kd *kaov1.KarmadaDeployment) ([]userRole, error) {
	roles := make([]userRole, 0, len(kd.Spec.Addons.UserRoles))
	for i, spec := range kd.Spec.Addons.UserRoles {
		field := fmt.Sprintf("spec.addons.userRoles[%d]", i)
		if err := r.checkUserRoleName(spec.Name, field); err != nil {
			return nil, err
		}
		for _, g := range spec.Groups {
			if !slices.Contains(pipeline.InventoryGroups, string(g)) {
				return nil, userRoleErrorf("%s.groups: %q is not a group of kao's inventory (%s)", field, g, strings.Join(pipeline.InventoryGroups, ", "))
			}
		}
		var files []runner.File
		var err error
		switch {
		case spec.ConfigMapName != "":
			files, err = r.readConfigMapRole(ctx, kd.Namespace, spec.ConfigMapName, field)
		case spec.Path != "":
			files, err = r.readPathRole(spec.Path, spec.Name, field)
		default:
			err = userRoleErrorf("%s: set configMapName or path", field)
		}
		if err != nil {
			return nil, err
		}
		hasTasks := slices.ContainsFunc(files, func(f runner.File) bool { return f.Path == "tasks/main.yml" || f.Path == "tasks/main.yaml" })
		switch {
		case !hasTasks && spec.ConfigMapName != "":
			return nil, userRoleErrorf("%s (role %s) has no tasks/main.yml (ConfigMap key tasks__main.yml)", field, spec.Name)
		case !hasTasks:
			return nil, userRoleErrorf("%s (role %s) has no tasks/main.yml", field, spec.Name)
		}
		roles = append(roles, userRole{spec: spec, files: files})
	}
	return roles, nil
}

// checkUserRoleName refuses a role named like one of kao's own roles: kao's
// would run instead, or, were the order reversed, replace kao's.
func (r *Reconciler) checkUserRoleName(name, field string) error {
	if !userRolePart.MatchString(name) || strings.Contains(name, ".") {
		return userRoleErrorf("%s.name: %q is not a role name", field, name)
	}
	for _, dir := range r.RolesPath {
		if info, err := os.Stat(filepath.Join(dir, name)); err == nil && info.IsDir() {
			return userRoleErrorf("%s.name: %q is the name of one of kao's roles; name the role differently", field, name)
		}
	}
	return nil
}

// readConfigMapRole reads a role from a ConfigMap in ns.
func (r *Reconciler) readConfigMapRole(ctx context.Context, ns, name, field string) ([]runner.File, error) {
	if !r.ConfigMapUserRoles {
		return nil, userRoleErrorf("%s.configMapName: this operator does not run roles from ConfigMaps: a ConfigMap role runs "+
			"with the operator's rights, so its administrator must allow it (--configmap-user-roles)", field)
	}
	cm := &corev1.ConfigMap{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, userRoleErrorf("ConfigMap %s/%s named in %s.configMapName does not exist", ns, name, field)
		}
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", ns, name, err)
	}
	files := []runner.File{}
	add := func(key string, data []byte) error {
		p, err := configMapRolePath(key)
		if err != nil {
			return userRoleErrorf("ConfigMap %s/%s named in %s.configMapName: %v", ns, name, field, err)
		}
		files = append(files, runner.File{Path: p, Data: data})
		return nil
	}
	for _, key := range pipeline.SortedKeys(cm.Data) {
		if err := add(key, []byte(cm.Data[key])); err != nil {
			return nil, err
		}
	}
	for _, key := range pipeline.SortedKeys(cm.BinaryData) {
		if err := add(key, cm.BinaryData[key]); err != nil {
			return nil, err
		}
	}
	if len(files) > maxUserRoleFiles {
		return nil, userRoleErrorf("ConfigMap %s/%s named in %s.configMapName holds %d files, more than %d", ns, name, field, len(files), maxUserRoleFiles)
	}
	slices.SortFunc(files, func(a, b runner.File) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}

// readPathRole reads a role directory from the operator's filesystem. The
// directory must lie under --user-roles-dir both as written and with
// symbolic links resolved, be named after the role, and hold only regular
// files and directories: symbolic links, devices and sockets are refused.
func (r *Reconciler) readPathRole(path, name, field string) ([]runner.File, error) {
	if r.UserRolesDir == "" {
		return nil, userRoleErrorf("%s.path: this operator runs no roles from its filesystem (start it with --user-roles-dir)", field)
	}
	root := filepath.Clean(r.UserRolesDir)
	clean := filepath.Clean(path)
	if !filepath.IsAbs(clean) || !within(root, clean) {
		return nil, userRoleErrorf("%s.path: %s is outside the operator's user roles directory %s", field, path, root)
	}
	if filepath.Base(clean) != name {
		return nil, userRoleErrorf("%s.path: the directory %s is not named after the role %s", field, path, name)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, userRoleErrorf("%s.path: the operator's user roles directory %s cannot be read: %v", field, root, err)
	}
	realDir, err := filepath.EvalSymlinks(clean)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, userRoleErrorf("%s.path: %s does not exist in the operator's filesystem", field, path)
		}
		return nil, userRoleErrorf("%s.path: %s cannot be read: %v", field, path, err)
	}
	if !within(realRoot, realDir) {
		return nil, userRoleErrorf("%s.path: %s leads outside the operator's user roles directory %s through a symbolic link", field, path, root)
	}
	if info, err := os.Stat(realDir); err != nil || !info.IsDir() {
		return nil, userRoleErrorf("%s.path: %s is not a directory", field, path)
	}
	files := []runner.File{}
	total := 0
	err = filepath.WalkDir(realDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(realDir, p)
		if rel == "." {
			return nil
		}
		shown := filepath.Join(path, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			return userRoleErrorf("%s.path: %s is a symbolic link; a user role may hold only files and directories", field, shown)
		case strings.Count(rel, string(filepath.Separator)) >= maxUserRoleDepth:
			return userRoleErrorf("%s.path: %s is more than %d levels deep", field, shown, maxUserRoleDepth)
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return userRoleErrorf("%s.path: %s is not a regular file", field, shown)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		total += len(data)
		if len(files) >= maxUserRoleFiles || total > maxUserRoleBytes {
			return userRoleErrorf("%s.path: %s holds more than %d files or %d MiB", field, path, maxUserRoleFiles, maxUserRoleBytes>>20)
		}
		files = append(files, runner.File{Path: filepath.ToSlash(rel), Data: data})
		return nil
	})
	if err != nil {
		if _, ok := reason.From(err); ok {
			return nil, err
		}
		return nil, userRoleErrorf("%s.path: reading %s: %v", field, path, err)
	}
	return files, nil
}

// within tells whether path is dir or lies below it (both clean).
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// userRolesDigest is the digest of the roles' names and files, recorded in
// status.userRolesDigest after a successful run: a later difference means
// their files changed.
func userRolesDigest(roles []userRole) string {
	h := sha256.New()
	field := func(b []byte) {
		_ = binary.Write(h, binary.BigEndian, uint64(len(b)))
		h.Write(b)
	}
	for _, r := range roles {
		field([]byte(r.spec.Name))
		for _, f := range r.files {
			field([]byte(f.Path))
			field(f.Data)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// unreadableUserRoles stands for the digest of roles that cannot be read
// now; it differs from every digest, so the run that follows says why.
const unreadableUserRoles = "unreadable"

// currentUserRolesDigest is the digest of the deployment's user roles now,
// computed only when it matters: the last run of this generation succeeded
// and the spec has user roles. Otherwise it is empty.
func (r *Reconciler) currentUserRolesDigest(ctx context.Context, kd *kaov1.KarmadaDeployment) string {
	last := kd.Status.LastRun
	if len(kd.Spec.Addons.UserRoles) == 0 || last == nil || last.Generation != kd.Generation || last.Result != kaov1.RunSucceeded {
		return ""
	}
	roles, err := r.loadUserRoles(ctx, kd)
	if err != nil {
		return unreadableUserRoles
	}
	return userRolesDigest(roles)
}

// userRolesRun is what a run with user roles adds to the run directory: the
// roles' files and the generated entry playbook, relative to the run
// directory, and the digest of the roles.
type userRolesRun struct {
	files  []runner.File
	digest string
}

// play is one play of the generated playbook.
type play struct {
	Name           string           `json:"name,omitempty"`
	Hosts          string           `json:"hosts,omitempty"`
	GatherFacts    *bool            `json:"gather_facts,omitempty"`
	AnyErrorsFatal bool             `json:"any_errors_fatal,omitempty"`
	PreTasks       []map[string]any `json:"pre_tasks,omitempty"`
	Roles          []map[string]any `json:"roles,omitempty"`
	Tasks          []map[string]any `json:"tasks,omitempty"`
	ImportPlaybook string           `json:"ansible.builtin.import_playbook,omitempty"`
}

// failedHostsFact is the localhost fact in which the generated playbook
// records the hosts that failed or were unreachable during kao's install.
const failedHostsFact = "kao_user_roles_failed_hosts"

// buildUserRolesRun lays out the user roles and the playbook that runs them
// around kao's install playbook (an absolute path). A BeforeInstall play
// has any_errors_fatal: a failure or an unreachable host ends the whole
// playbook, so kao installs nothing. The AfterInstall plays run only when
// every host got through the install: a play after the install records the
// hosts that failed, and each AfterInstall play ends at once when there are
// any.
func buildUserRolesRun(roles []userRole, install string) (*userRolesRun, error) {
	out := &userRolesRun{digest: userRolesDigest(roles)}
	for _, r := range roles {
		for _, f := range r.files {
			out.files = append(out.files, runner.File{Path: filepath.Join(userRolesDir, r.spec.Name, filepath.FromSlash(f.Path)), Data: f.Data})
		}
	}
	noFacts := false
	rolePlay := func(r userRole) play {
		groups := make([]string, 0, len(r.spec.Groups))
		for _, g := range r.spec.Groups {
			groups = append(groups, string(g))
		}
		p := play{Hosts: strings.Join(groups, ":"), GatherFacts: &noFacts, Roles: []map[string]any{{"role": r.spec.Name}}}
		if r.spec.Stage == kaov1.BeforeInstallStage {
			p.Name = fmt.Sprintf("User roles | Run %s before kao's install", r.spec.Name)
			p.AnyErrorsFatal = true
			return p
		}
		p.Name = fmt.Sprintf("User roles | Run %s after kao's install", r.spec.Name)
		p.PreTasks = []map[string]any{{
			"name":                 "User roles | Skip " + r.spec.Name + ": the install failed on a host",
			"ansible.builtin.meta": "end_play",
			"when":                 "hostvars['localhost']." + failedHostsFact + " | default(['unknown']) | length > 0",
		}}
		return p
	}
	var plays []play
	for _, r := range roles {
		if r.spec.Stage == kaov1.BeforeInstallStage {
			plays = append(plays, rolePlay(r))
		}
	}
	plays = append(plays, play{ImportPlaybook: install})
	after := false
	for _, r := range roles {
		if r.spec.Stage != kaov1.AfterInstallStage {
			continue
		}
		if !after {
			after = true
			plays = append(plays, play{
				Name: "User roles | Record the hosts the install failed on", Hosts: "all:localhost", GatherFacts: &noFacts,
				Tasks: []map[string]any{{
					"name":                     "User roles | Record the hosts the install failed on",
					"ansible.builtin.set_fact": map[string]any{failedHostsFact: "{{ ansible_play_hosts_all | difference(ansible_play_hosts) }}"},
					"delegate_to":              "localhost",
					"delegate_facts":           true,
					"run_once":                 true,
				}},
			})
		}
		plays = append(plays, rolePlay(r))
	}
	data, err := yaml.Marshal(plays)
	if err != nil {
		return nil, fmt.Errorf("rendering the user roles playbook: %w", err)
	}
	header := []byte("# Generated by kao for one run: the user roles of spec.addons.userRoles around kao's install playbook.\n")
	out.files = append(out.files, runner.File{Path: filepath.FromSlash(userRolesPlaybook), Data: bytes.Join([][]byte{header, data}, nil)})
	return out, nil
}

// withUserRoles makes spec run the user roles around playbook (kao's own,
// an absolute path): the roles and the generated playbook go into the run
// directory, whose user-roles directory comes last in the roles path, after
// kao's. It returns the roles' digest.
func withUserRoles(spec *runner.Spec, roles []userRole, playbook string) (string, error) {
	ur, err := buildUserRolesRun(roles, playbook)
	if err != nil {
		return "", err
	}
	spec.Files = append(spec.Files, ur.files...)
	spec.Playbook = filepath.Join(spec.Dir, filepath.FromSlash(userRolesPlaybook))
	spec.RolesPath = append(slices.Clone(spec.RolesPath), filepath.Join(spec.Dir, userRolesDir))
	return ur.digest, nil
}
