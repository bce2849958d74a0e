package roles

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// kaoFilesPlaybook converges three files and a directory with kao_files and
// inspects one of them with kao_stat, reporting what changed in lines the
// test parses.
const kaoFilesPlaybook = `- name: Files | Converge files with kao_common's modules
  hosts: localhost
  gather_facts: false
  roles:
    - role: kao_common
  tasks:
    - name: Files | Converge
      kao_files:
        directories:
          - {path: "{{ kf_dir }}/etc", mode: "0750", tags: [dir]}
        files:
          - {path: "{{ kf_dir }}/etc/ca.crt", content: "{{ kf_cert }}", tags: [cert]}
          - {path: "{{ kf_dir }}/etc/tls.key", content: "{{ kf_secret }}", mode: "0600", tags: [key]}
          - {path: "{{ kf_dir }}/etc/kf-test.service", content: "{{ kf_unit }}", verify: systemd-unit, tags: [unit]}
      register: kf

    - name: Files | Report
      ansible.builtin.debug:
        msg: "KF paths={{ kf.changed_paths | map('basename') | join(',') }} tags={{ kf.changed_tags | join(',') }}"

    - name: Files | Inspect
      kao_stat:
        paths: ["{{ kf_dir }}/etc/ca.crt", "{{ kf_dir }}/missing"]
      register: st

    - name: Files | Report the inspection
      ansible.builtin.debug:
        msg: >-
          KS {{ st.stat[kf_dir ~ '/etc/ca.crt'].sha256 }} {{ st.stat[kf_dir ~ '/etc/ca.crt'].mode }}
          {{ st.stat[kf_dir ~ '/etc/ca.crt'].owner }} {{ st.stat[kf_dir ~ '/missing'].exists }}
`

var (
	kfReport = regexp.MustCompile(`"msg": "KF paths=([^ "]*) tags=([^"]*)"`)
	ksReport = regexp.MustCompile(`"msg": "KS ([0-9a-f]{64}) ([0-7]{4}) (\S+) (True|False)"`)
)

// TestKaoFiles drives the kao_files and kao_stat modules every role writes
// and checks its files with, on this machine (connection local, as root):
// only differing files are written, with exact bytes and modes, tags say
// what changed, a private key's content never reaches the output, and a unit
// systemd-analyze refuses leaves every file of the call as it was.
func TestKaoFiles(t *testing.T) {
	requirePrerequisites(t)
	if os.Geteuid() != 0 {
		t.Fatal("TestKaoFiles needs root: kao_files sets root ownership (run the role tests as root, as .ci/run does)")
	}
	dir := t.TempDir()
	a := localAnsible(t)
	inv := a.writeFile(t, "inventory.ini", []byte("localhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n"))
	pb := a.writeFile(t, "files.yml", []byte(kaoFilesPlaybook))

	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		t.Fatal(err)
	}
	secretMark := "kao-test-secret-" + hex.EncodeToString(nonce)
	vars := map[string]string{
		"kf_dir":    dir,
		"kf_cert":   "cert line\n\n",
		"kf_secret": "-----BEGIN PRIVATE KEY-----\n" + secretMark + "\n-----END PRIVATE KEY-----\n",
		"kf_unit":   "[Unit]\nDescription=kao test\n[Service]\nExecStart=/bin/true\n",
	}
	converge := func(t *testing.T) (run, []string, []string) {
		t.Helper()
		r := a.playbook(t, inv, a.extraVars(t, "vars.json", vars), pb)
		if strings.Contains(r.out, secretMark) {
			t.Fatalf("the private key's content reached the output:\n%s", r.out)
		}
		m := kfReport.FindStringSubmatch(r.out)
		if m == nil {
			return r, nil, nil
		}
		return r, splitList(m[1]), splitList(m[2])
	}
	etc := filepath.Join(dir, "etc")

	t.Run("writes everything the first time", func(t *testing.T) {
		r, paths, tags := converge(t)
		r.mustSucceed(t, "localhost")
		wantList(t, "changed paths", paths, "etc", "ca.crt", "tls.key", "kf-test.service")
		wantList(t, "changed tags", tags, "cert", "dir", "key", "unit")
		wantFile(t, etc, 0o750|os.ModeDir, "")
		wantFile(t, filepath.Join(etc, "ca.crt"), 0o644, vars["kf_cert"])
		wantFile(t, filepath.Join(etc, "tls.key"), 0o600, vars["kf_secret"])
		wantFile(t, filepath.Join(etc, "kf-test.service"), 0o644, vars["kf_unit"])

		m := ksReport.FindStringSubmatch(r.out)
		if m == nil {
			t.Fatalf("no kao_stat report:\n%s", r.out)
		}
		sum := sha256.Sum256([]byte(vars["kf_cert"]))
		if m[1] != hex.EncodeToString(sum[:]) || m[2] != "0644" || m[3] != "root" || m[4] != "False" {
			t.Errorf("kao_stat reported %q; want sha256 %x, mode 0644, owner root, missing path absent", m[1:], sum)
		}
	})

	t.Run("changes nothing the second time", func(t *testing.T) {
		r, paths, tags := converge(t)
		r.mustSucceed(t, "localhost")
		if len(paths) != 0 || len(tags) != 0 || r.recap["localhost"].Changed != 0 {
			t.Fatalf("second run changed %v (tags %v, recap %+v)", paths, tags, r.recap["localhost"])
		}
	})

	t.Run("rewrites only what differs, and tags it", func(t *testing.T) {
		if err := os.Chmod(filepath.Join(etc, "ca.crt"), 0o600); err != nil {
			t.Fatal(err)
		}
		vars["kf_secret"] = "-----BEGIN PRIVATE KEY-----\n" + secretMark + "-renewed\n-----END PRIVATE KEY-----\n"
		r, paths, tags := converge(t)
		r.mustSucceed(t, "localhost")
		wantList(t, "changed paths", paths, "ca.crt", "tls.key")
		wantList(t, "changed tags", tags, "cert", "key")
		wantFile(t, filepath.Join(etc, "ca.crt"), 0o644, vars["kf_cert"])
		wantFile(t, filepath.Join(etc, "tls.key"), 0o600, vars["kf_secret"])
	})

	t.Run("changes no file when systemd-analyze refuses a new unit", func(t *testing.T) {
		good, cert := vars["kf_unit"], vars["kf_cert"]
		vars["kf_unit"] = "[Unit]\nDescription=kao test\n[Service]\nExecStart=/nonexistent/kao-test\n"
		vars["kf_cert"] = "renewed cert\n"
		r, _, _ := converge(t)
		if r.err == nil || !strings.Contains(r.out, "systemd-analyze verify refused the new unit") ||
			!strings.Contains(r.out, "/nonexistent/kao-test") {
			t.Fatalf("want the run refused with systemd-analyze's reason, got %v:\n%s", r.err, r.out)
		}
		// The certificate listed before the unit stays as it was too: the
		// failed task notifies no handler, so nothing may change unnoticed.
		wantFile(t, filepath.Join(etc, "kf-test.service"), 0o644, good)
		wantFile(t, filepath.Join(etc, "ca.crt"), 0o644, cert)
		left, err := filepath.Glob(filepath.Join(etc, ".kao-*"))
		if err != nil || len(left) > 0 {
			t.Errorf("temporary files left behind: %v %v", left, err)
		}
	})
}

// localAnsible runs playbooks on this machine with the repository's roles.
func localAnsible(t *testing.T) *ansible {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ansible.cfg")
	if err := os.WriteFile(cfg, []byte("# empty: settings come from the environment\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &ansible{dir: dir, env: []string{
		"ANSIBLE_CONFIG=" + cfg,
		"ANSIBLE_ROLES_PATH=" + filepath.Join(repoRoot(t), "roles"),
		"ANSIBLE_RETRY_FILES_ENABLED=False",
		"ANSIBLE_NOCOLOR=1",
		"ANSIBLE_STDOUT_CALLBACK=default",
		"ANSIBLE_LOCAL_TEMP=" + filepath.Join(dir, "tmp"),
	}}
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func wantList(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

// wantFile checks a path's mode, and its content unless want is empty.
func wantFile(t *testing.T, path string, mode os.FileMode, want string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode() != mode {
		t.Errorf("%s: mode %v, want %v", path, st.Mode(), mode)
	}
	if want == "" {
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s: content %q, want %q", path, got, want)
	}
}
