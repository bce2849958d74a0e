package roles

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/inventory"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/runner"
	"github.com/kao-io/kao/test/hosts"
)

// repoRoot is the repository root; tests run in their package directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// requirePrerequisites skips t in -short mode and fails it when a tool the
// role tests run is missing: CI installs them (.ci/run), and a skipped test
// would pass on a machine that never ran it.
func requirePrerequisites(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("role tests: skipped in -short mode (they boot test hosts and run ansible-playbook)")
	}
	var missing []string
	for _, tool := range []string{"ansible-playbook", "openssl", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("role tests need %s on PATH. Install them: sudo apt-get install ansible openssl (and Go); "+
			"to skip these tests: go test -short", strings.Join(missing, ", "))
	}
}

// manifest is the bundle's manifest.json.
type manifest struct {
	Karmada    string `json:"karmada"`
	Kubernetes string `json:"kubernetes"`
	Etcd       string `json:"etcd"`
}

// buildBundle runs hack/artifacts.sh (a no-op when the bundle is up to date)
// and returns the bundle directory and its manifest.
func buildBundle(t testing.TB) (string, manifest) {
	t.Helper()
	root := repoRoot(t)
	dir := os.Getenv("KAO_ARTIFACTS_DIR")
	if dir == "" {
		dir = filepath.Join(root, "_out", "artifacts")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "artifacts.sh"))
	cmd.Env = append(os.Environ(), "KAO_ARTIFACTS_DIR="+dir)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/artifacts.sh: %v\n%s", err, out)
	}
	t.Logf("bundle %s ready in %s", dir, time.Since(start).Round(time.Millisecond))
	var m manifest
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if m.Etcd == "" || m.Karmada == "" || m.Kubernetes == "" {
		t.Fatalf("manifest.json lacks a version: %s", data)
	}
	return dir, m
}

// copyBundle copies the manifest, SHA256SUMS and the named bundle files (not
// links: tests damage the copies) into a new directory.
func copyBundle(t testing.TB, src string, files ...string) string {
	t.Helper()
	dst := t.TempDir()
	for _, f := range append([]string{"manifest.json", "SHA256SUMS"}, files...) {
		copyFile(t, filepath.Join(src, f), filepath.Join(dst, f))
	}
	return dst
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	st, err := in.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// genEtcdPKI writes the etcd PKI files the etcd role reads, with openssl, in
// the flat layout of kao_pki_dir: a CA, a server and a peer certificate per
// host (its name and address in the SANs; the server one also loopback), and
// the health-check client. Keys are ECDSA P-256.
func genEtcdPKI(t testing.TB, hs []hosts.Host) string {
	t.Helper()
	dir := t.TempDir()
	ossl := func(args ...string) {
		t.Helper()
		cmd := exec.Command("openssl", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	key := func(name string) {
		ossl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name+".key")
	}
	key("etcd-ca")
	ossl("req", "-x509", "-new", "-key", "etcd-ca.key", "-subj", "/CN=etcd-ca", "-days", "2", "-out", "etcd-ca.crt",
		"-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
	leaf := func(name, cn, usage, sans string) {
		t.Helper()
		key(name)
		ossl("req", "-new", "-key", name+".key", "-subj", "/CN="+cn, "-out", name+".csr")
		ext := "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=" + usage + "\n"
		if sans != "" {
			ext += "subjectAltName=" + sans + "\n"
		}
		if err := os.WriteFile(filepath.Join(dir, name+".ext"), []byte(ext), 0o600); err != nil {
			t.Fatal(err)
		}
		ossl("x509", "-req", "-in", name+".csr", "-CA", "etcd-ca.crt", "-CAkey", "etcd-ca.key", "-CAcreateserial",
			"-days", "2", "-extfile", name+".ext", "-out", name+".crt")
		for _, f := range []string{name + ".csr", name + ".ext"} {
			if err := os.Remove(filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, h := range hs {
		leaf("etcd-server-"+h.Name, h.Name, "serverAuth,clientAuth", "DNS:"+h.Name+",DNS:localhost,IP:"+h.Address+",IP:127.0.0.1")
		leaf("etcd-peer-"+h.Name, h.Name, "serverAuth,clientAuth", "DNS:"+h.Name+",IP:"+h.Address)
	}
	leaf("etcd-healthcheck-client", "kube-etcd-healthcheck-client", "clientAuth", "")
	return dir
}

// etcdDeployment is a Binary KarmadaDeployment with managed etcd on hs.
func etcdDeployment(hs []hosts.Host, etcd kaov1.ManagedEtcd) *kaov1.KarmadaDeployment {
	kd := &kaov1.KarmadaDeployment{}
	kd.Name, kd.Namespace = "dc1", "karmada-ops"
	kd.Spec = kaov1.KarmadaDeploymentSpec{
		Mode:    kaov1.BinaryMode,
		Version: "v1.18.1",
		SSH: &kaov1.SSHSpec{
			PrivateKeySecretRef: kaov1.SecretKeyReference{Name: "ssh", Key: "id_ed25519"},
			KnownHostsSecretRef: kaov1.SecretKeyReference{Name: "ssh", Key: "known_hosts"},
		},
		APIServer: kaov1.APIServerSpec{Endpoint: hs[0].Address + ":5443"},
		Etcd:      kaov1.EtcdSpec{Managed: &etcd},
	}
	for _, h := range hs {
		kd.Spec.Hosts = append(kd.Spec.Hosts, kaov1.Host{
			Name: h.Name, Address: h.Address, Port: int32(h.Port), User: h.User,
			Roles: []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole},
		})
	}
	return kd
}

// ansible runs playbooks against the test hosts the way kao does: host keys
// pinned, the harness key, extra vars from a 0600 file, compiled templates
// shared through kao_jinja_cache. Where kao gives each run a cache of its
// own, a test's runs share one: the plugin checks, on every load, that the
// filters and tests the code was compiled against are called the same way.
type ansible struct {
	dc  *hosts.Cluster
	dir string
	env []string
}

func newAnsible(t testing.TB, dc *hosts.Cluster) *ansible {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ansible.cfg")
	if err := os.WriteFile(cfg, []byte("# empty: settings come from the environment\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"cp", "jinja-cache"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sshArgs := strings.Join([]string{
		"-o UserKnownHostsFile=" + dc.KnownHostsPath(),
		"-o StrictHostKeyChecking=yes",
		"-o GlobalKnownHostsFile=/dev/null",
		"-o IdentitiesOnly=yes",
		"-o ControlMaster=auto",
		"-o ControlPersist=30s",
	}, " ")
	return &ansible{dc: dc, dir: dir, env: []string{
		"ANSIBLE_CONFIG=" + cfg,
		"ANSIBLE_HOST_KEY_CHECKING=True",
		"ANSIBLE_PRIVATE_KEY_FILE=" + dc.PrivateKeyPath(),
		"ANSIBLE_SSH_ARGS=" + sshArgs,
		"ANSIBLE_SSH_CONTROL_PATH_DIR=" + filepath.Join(dir, "cp"),
		"ANSIBLE_PIPELINING=True",
		"ANSIBLE_ROLES_PATH=" + filepath.Join(repoRoot(t), "roles"),
		"ANSIBLE_FORKS=10",
		"ANSIBLE_PYTHON_INTERPRETER=/usr/bin/python3",
		"ANSIBLE_RETRY_FILES_ENABLED=False",
		"ANSIBLE_NOCOLOR=1",
		"ANSIBLE_STDOUT_CALLBACK=default",
		"ANSIBLE_LOCAL_TEMP=" + filepath.Join(dir, "tmp"),
		"ANSIBLE_CALLBACK_PLUGINS=" + filepath.Join(repoRoot(t), "internal", "runner", "plugins", "callback"),
		runner.JinjaCacheEnv + "=" + filepath.Join(dir, "jinja-cache"),
	}}
}

// writeFile writes name in the runner's directory and returns its path.
func (a *ansible) writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(a.dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// inventory writes kao's inventory of kd (internal/inventory's hosts.json).
func (a *ansible) inventory(t testing.TB, name string, kd *kaov1.KarmadaDeployment) string {
	t.Helper()
	if kd.UID == "" {
		// The roles mark what they install with the deployment's UID: every
		// inventory of a test is one deployment's.
		kd.UID = roleTestUID
	}
	inv, err := inventory.Build(kd, inventory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := inv.FileJSON()
	if err != nil {
		t.Fatal(err)
	}
	return a.writeFile(t, name, data)
}

// roleTestUID is the UID of the deployment a role test's inventories
// describe, as the API server would have given it.
const roleTestUID = "0e5c7a1d-5a3c-4c1e-9f0a-0123456789ab"

// extraVars writes the run's variables, each string marked unsafe as the
// operator does.
func (a *ansible) extraVars(t testing.TB, name string, vars map[string]string) string {
	t.Helper()
	out := map[string]any{}
	for k, v := range vars {
		out[k] = map[string]string{"__ansible_unsafe": v}
	}
	data, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return a.writeFile(t, name, data)
}

// recap is one host's line of the PLAY RECAP.
type recap struct {
	OK, Changed, Unreachable, Failed, Skipped int
}

// run is the outcome of one ansible-playbook run.
type run struct {
	out   string
	err   error
	recap map[string]recap
	took  time.Duration
}

var recapLine = regexp.MustCompile(`(?m)^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)`)

func parseRecap(out string) map[string]recap {
	res := map[string]recap{}
	for _, m := range recapLine.FindAllStringSubmatch(out, -1) {
		n := make([]int, 5)
		for i := range n {
			n[i], _ = strconv.Atoi(m[i+2])
		}
		res[m[1]] = recap{OK: n[0], Changed: n[1], Unreachable: n[2], Failed: n[3], Skipped: n[4]}
	}
	return res
}

// playbookTimeout bounds one ansible-playbook run of a role test.
const playbookTimeout = 5 * time.Minute

// playbook runs ansible-playbook and keeps its output in the runner's
// directory; it never fails t itself.
func (a *ansible) playbook(t testing.TB, inventoryPath, extraVarsPath, playbook string) run {
	t.Helper()
	return a.playbookWithin(t, playbookTimeout, inventoryPath, extraVarsPath, playbook)
}

// playbookWithin is playbook with its own time limit, and more
// ansible-playbook arguments (such as --check).
func (a *ansible) playbookWithin(t testing.TB, timeout time.Duration, inventoryPath, extraVarsPath, playbook string, args ...string) run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ansible-playbook", append([]string{"-i", inventoryPath, "-e", "@" + extraVarsPath, playbook}, args...)...)
	cmd.Dir = a.dir
	cmd.Env = append(os.Environ(), a.env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	err := cmd.Run()
	r := run{out: out.String(), err: err, recap: parseRecap(out.String()), took: time.Since(start)}
	logName := fmt.Sprintf("%s-%d.log", filepath.Base(playbook), time.Now().UnixNano())
	_ = os.WriteFile(filepath.Join(a.dir, logName), out.Bytes(), 0o600)
	t.Logf("ansible-playbook %s: %v in %s, recap %+v", filepath.Base(playbook), errOrOK(err), r.took.Round(time.Millisecond), r.recap)
	return r
}

// pkiHosts converts test hosts into internal/pki's hosts.
func pkiHosts(hs []hosts.Host) []pki.Host {
	out := make([]pki.Host, len(hs))
	for i, h := range hs {
		out[i] = pki.Host{Name: h.Name, Address: h.Address}
	}
	return out
}

// issuePKI issues kao's PKI for req with internal/pki and writes it flat into
// a directory, as the operator writes kao_pki_dir.
func issuePKI(t *testing.T, req pki.Request) (pki.Bundle, string) {
	t.Helper()
	b, _, _, err := pki.Ensure(nil, req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range b {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return b, dir
}

func errOrOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// mustSucceed fails t with the run's output unless it succeeded on every
// host in want.
func (r run) mustSucceed(t testing.TB, want ...string) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("ansible-playbook failed: %v\n%s", r.err, r.out)
	}
	for _, h := range want {
		rc, ok := r.recap[h]
		if !ok || rc.Failed != 0 || rc.Unreachable != 0 {
			t.Fatalf("host %s did not run cleanly (%+v)\n%s", h, rc, r.out)
		}
	}
}

// mustFail fails t unless the run failed on host with a message containing
// msg.
func (r run) mustFail(t testing.TB, host, msg string) {
	t.Helper()
	if r.err == nil || r.recap[host].Failed == 0 {
		t.Fatalf("the run did not fail on %s (%+v)\n%s", host, r.recap[host], r.out)
	}
	if !strings.Contains(r.out, msg) {
		t.Fatalf("the run failed on %s without saying %q:\n%s", host, msg, r.out)
	}
}

// etcdctl runs the bundle's etcdctl on this machine against endpoints with
// the health-check client certificate.
func etcdctl(ctx context.Context, bin, pki string, endpoints []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	full := append([]string{
		"--endpoints=" + strings.Join(endpoints, ","),
		"--cacert=" + filepath.Join(pki, "etcd-ca.crt"),
		"--cert=" + filepath.Join(pki, "etcd-healthcheck-client.crt"),
		"--key=" + filepath.Join(pki, "etcd-healthcheck-client.key"),
		"--dial-timeout=5s",
		"--command-timeout=10s",
	}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("etcdctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// clientURLs are the etcd client URLs of hs.
func clientURLs(hs []hosts.Host) []string {
	var urls []string
	for _, h := range hs {
		urls = append(urls, "https://"+h.Address+":2379")
	}
	return urls
}
