package roles

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// installPlaybook runs the etcd role the way install.yml does: on the etcd
// group, without facts.
const installPlaybook = `- name: Etcd | Install the etcd cluster
  hosts: etcd
  gather_facts: false
  roles:
    - role: etcd
`

// uninstallPlaybook runs the role's removal the way uninstall.yml does.
const uninstallPlaybook = `- name: Etcd | Remove the etcd cluster
  hosts: etcd
  gather_facts: false
  tasks:
    - name: Etcd | Remove the etcd member
      ansible.builtin.import_role:
        name: etcd
        tasks_from: uninstall
`

// TestEtcd installs a three-member TLS etcd cluster from the offline bundle
// with the etcd role, proves it serves, converges with changed=0, restarts
// members one at a time, refuses a damaged bundle, restores the cluster from
// a snapshot with playbooks/etcd-restore.yml (etcdRestoreSteps), uninstalls,
// and then runs a one-member cluster.
func TestEtcd(t *testing.T) {
	requirePrerequisites(t)
	testenv.Lane(t)
	bundle, m := buildBundle(t)
	dc := hosts.Start(t, 3)
	hs := dc.Hosts()
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.Name
	}
	ctx := context.Background()
	pki := genEtcdPKI(t, hs)
	a := newAnsible(t, dc)
	etcdctlBin := filepath.Join(bundle, "etcd", m.Etcd, "bin", "etcdctl")
	install := a.writeFile(t, "install.yml", []byte(installPlaybook))
	uninstall := a.writeFile(t, "uninstall.yml", []byte(uninstallPlaybook))
	vars := a.extraVars(t, "vars.json", map[string]string{"kao_artifacts_dir": bundle, "kao_pki_dir": pki})

	// An extra arg whose value systemd, a shell and Jinja would each
	// interpret: it must reach etcd byte for byte, and the lookup must never
	// run on the controller.
	sentinel := filepath.Join(a.dir, "pwned")
	payload := "a b $HOME ${HOME} %n %% \"dq\" 'sq' \\ \\n \ttab\nline2 {{ lookup('pipe', 'touch " + sentinel + "') }}"
	three := kaov1.ManagedEtcd{
		PurgeDataOnDelete: true,
		ExtraArgs: []kaov1.Arg{
			{Name: "quota-backend-bytes", Value: "4294967296"},
			{Name: "discovery-srv-name", Value: payload},
		},
	}
	inv3 := a.inventory(t, "etcd3.json", etcdDeployment(hs, three))
	// changed is three with a new value of an extra arg, which restarts every
	// member.
	changed := three
	changed.ExtraArgs = []kaov1.Arg{{Name: "quota-backend-bytes", Value: "8589934592"}, three.ExtraArgs[1]}

	// refused runs the install with a damaged copy of the bundle or PKI and
	// expects a failure naming the problem, with nothing installed.
	refused := func(t *testing.T, bundleDir, pkiDir string, wants ...string) {
		t.Helper()
		v := a.extraVars(t, "vars-"+strings.ReplaceAll(t.Name(), "/", "-")+".json",
			map[string]string{"kao_artifacts_dir": bundleDir, "kao_pki_dir": pkiDir})
		r := a.playbook(t, inv3, v, install)
		if r.err == nil {
			t.Fatalf("the install succeeded:\n%s", r.out)
		}
		for _, w := range wants {
			if !strings.Contains(r.out, w) {
				t.Errorf("the failure does not say %q:\n%s", w, r.out)
			}
		}
		for _, h := range names {
			out, err := dc.Run(ctx, h, "ls -A /usr/local/bin; test ! -e /etc/karmada/pki/etcd || echo certificates")
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(out) != "" {
				t.Errorf("%s got files although the run was refused: %q", h, out)
			}
		}
	}
	etcdBins := []string{"etcd/" + m.Etcd + "/bin/etcd", "etcd/" + m.Etcd + "/bin/etcdctl", "etcd/" + m.Etcd + "/bin/etcdutl"}

	testenv.Step(t, "refuses a corrupted binary", func(t *testing.T) {
		bad := copyBundle(t, bundle, etcdBins...)
		f, err := os.OpenFile(filepath.Join(bad, etcdBins[0]), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		refused(t, bad, pki, etcdBins[0]+" in the artifacts bundle "+bad+" does not match SHA256SUMS", "refusing to install it")
	})

	testenv.Step(t, "refuses a bundle without a binary", func(t *testing.T) {
		bad := copyBundle(t, bundle, etcdBins[:2]...)
		refused(t, bad, pki, "the artifacts bundle "+bad+" has no "+etcdBins[2])
	})

	testenv.Step(t, "refuses missing certificates", func(t *testing.T) {
		partial := t.TempDir()
		entries, err := os.ReadDir(pki)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != "etcd-peer-"+names[1]+".key" {
				copyFile(t, filepath.Join(pki, e.Name()), filepath.Join(partial, e.Name()))
			}
		}
		refused(t, bundle, partial, "the PKI directory "+partial+" on the controller has no etcd-peer-"+names[1]+".key")
	})

	testenv.Step(t, "installs three members", func(t *testing.T) {
		r := a.playbook(t, inv3, vars, install)
		r.mustSucceed(t, names...)
		for _, h := range names {
			if r.recap[h].Changed == 0 {
				t.Errorf("the first run changed nothing on %s: %+v", h, r.recap[h])
			}
		}
		if !strings.Contains(r.out, "https://"+hs[0].Address+":2379") {
			t.Errorf("the run does not report the member list:\n%s", r.out)
		}
	})

	testenv.Step(t, "serves from every member", func(t *testing.T) {
		checkHealthy(ctx, t, etcdctlBin, pki, hs)
		out, err := etcdctl(ctx, etcdctlBin, pki, clientURLs(hs), "member", "list", "--write-out=json")
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Members []struct {
				Name       string   `json:"name"`
				ClientURLs []string `json:"clientURLs"`
			} `json:"members"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("member list: %v: %s", err, out)
		}
		var got []string
		for _, mem := range list.Members {
			got = append(got, mem.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, names) {
			t.Errorf("members are %v, want %v", got, names)
		}
		if _, err := etcdctl(ctx, etcdctlBin, pki, clientURLs(hs[:1]), "put", "/kao/roles-test", "written-via-"+names[0]); err != nil {
			t.Fatal(err)
		}
		val, err := etcdctl(ctx, etcdctlBin, pki, clientURLs(hs[2:]), "get", "/kao/roles-test", "--print-value-only")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(val) != "written-via-"+names[0] {
			t.Errorf("read %q via %s, want what %s stored", val, names[2], names[0])
		}
		// Clients must present a certificate signed by the etcd CA.
		anon := exec.CommandContext(ctx, etcdctlBin, "--endpoints="+clientURLs(hs[:1])[0], "--cacert="+filepath.Join(pki, "etcd-ca.crt"),
			"--dial-timeout=3s", "--command-timeout=5s", "get", "/kao/roles-test")
		if out, err := anon.CombinedOutput(); err == nil {
			t.Errorf("etcd served a client without a certificate: %s", out)
		}
	})

	testenv.Step(t, "installs verified files with tight modes", func(t *testing.T) {
		sums, err := os.ReadFile(filepath.Join(bundle, "SHA256SUMS"))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range names {
			out, err := dc.Run(ctx, h, "cd /usr/local/bin && sha256sum etcd etcdctl etcdutl && "+
				"stat -c '%n %a %U' /usr/local/bin/etcd /etc/karmada/pki/etcd/*.key /etc/karmada/pki/etcd/ca.crt /var/lib/karmada-etcd")
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(line)
				switch {
				case len(f) == 2: // sha256sum: the bundle's checksum of etcd/<version>/bin/<name>
					if want := f[0] + "  etcd/" + m.Etcd + "/bin/" + f[1] + "\n"; !strings.Contains(string(sums), want) {
						t.Errorf("%s: /usr/local/bin/%s is not the bundle's", h, f[1])
					}
				case len(f) == 3: // stat: path, mode, owner
					want := "644"
					switch {
					case f[0] == "/usr/local/bin/etcd":
						want = "755"
					case f[0] == "/var/lib/karmada-etcd":
						want = "700"
					case strings.HasSuffix(f[0], ".key"):
						want = "600"
					}
					if f[1] != want || f[2] != "root" {
						t.Errorf("%s: %s has mode %s owner %s, want %s root", h, f[0], f[1], f[2], want)
					}
				default:
					t.Errorf("%s: unexpected line %q", h, line)
				}
			}
		}
	})

	testenv.Step(t, "passes extra args literally", func(t *testing.T) {
		argv := etcdArgv(ctx, t, dc, names[0])
		if want := "--discovery-srv-name=" + payload; !slices.Contains(argv, want) {
			t.Errorf("etcd did not get %q; its argv is %q", want, argv)
		}
		if !slices.Contains(argv, "--quota-backend-bytes=4294967296") {
			t.Errorf("etcd did not get --quota-backend-bytes; its argv is %q", argv)
		}
		if _, err := os.Stat(sentinel); err == nil {
			t.Error("a Jinja lookup from an extra arg ran on the controller")
		}
	})

	testenv.Step(t, "renders the unit", func(t *testing.T) {
		unit, err := dc.Run(ctx, names[0], "cat /etc/systemd/system/karmada-etcd.service")
		if err != nil {
			t.Fatal(err)
		}
		// Addresses and the sentinel path change from run to run.
		unit = strings.ReplaceAll(unit, sentinel, "SENTINEL")
		for _, h := range hs {
			unit = strings.ReplaceAll(unit, h.Address, "ADDRESS-"+h.Name)
		}
		golden(t, "karmada-etcd.service.golden", unit)
	})

	testenv.Step(t, "second run changes nothing", func(t *testing.T) {
		r := a.playbook(t, inv3, vars, install)
		r.mustSucceed(t, names...)
		for _, h := range names {
			if r.recap[h].Changed != 0 {
				t.Errorf("the second run changed %d things on %s:\n%s", r.recap[h].Changed, h, r.out)
			}
		}
	})

	testenv.Step(t, "restarts one member at a time", func(t *testing.T) {
		inv := a.inventory(t, "etcd3-changed.json", etcdDeployment(hs, changed))
		r := a.playbook(t, inv, vars, install)
		r.mustSucceed(t, names...)
		// Each member went down only after the previous one was back up.
		var rs []hosts.Restart
		for _, h := range names {
			r, err := dc.LastRestart(ctx, h, "karmada-etcd")
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
			if !slices.Contains(etcdArgv(ctx, t, dc, h), "--quota-backend-bytes=8589934592") {
				t.Errorf("%s runs without the new flag", h)
			}
		}
		if hosts.Overlap(rs) {
			t.Errorf("two members were down at once: %v", rs)
		}
		checkHealthy(ctx, t, etcdctlBin, pki, hs)
		val, err := etcdctl(ctx, etcdctlBin, pki, clientURLs(hs[1:2]), "get", "/kao/roles-test", "--print-value-only")
		if err != nil || strings.TrimSpace(val) != "written-via-"+names[0] {
			t.Errorf("the data did not survive the restarts: %q, %v", val, err)
		}
	})

	// The restore runs on the cluster as it is now: three members, with the
	// changed extra args. Restoring leaves the members' previous data
	// directories next to the new ones, which the uninstall keeps.
	etcdRestoreSteps(t, dc, a, bundle, pki, etcdctlBin, etcdDeployment(hs, changed))

	testenv.Step(t, "uninstalls and purges the data", func(t *testing.T) {
		r := a.playbook(t, inv3, vars, uninstall)
		r.mustSucceed(t, names...)
		for _, h := range names {
			out, err := dc.Run(ctx, h, "for p in /etc/systemd/system/karmada-etcd.service /etc/karmada/pki/etcd /var/lib/karmada-etcd; do "+
				"test ! -e $p || echo $p; done; systemctl is-active karmada-etcd || true")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(out); got != "inactive" {
				t.Errorf("%s still has etcd after the uninstall: %q", h, got)
			}
		}
		again := a.playbook(t, inv3, vars, uninstall)
		again.mustSucceed(t, names...)
		for _, h := range names {
			if again.recap[h].Changed != 0 {
				t.Errorf("a second uninstall changed %d things on %s", again.recap[h].Changed, h)
			}
		}
	})

	testenv.Step(t, "runs a one-member cluster", func(t *testing.T) {
		one := kaov1.ManagedEtcd{Version: m.Etcd, DataDir: "/srv/karmada/etcd"}
		inv1 := a.inventory(t, "etcd1.json", etcdDeployment(hs[:1], one))
		r := a.playbook(t, inv1, vars, install)
		r.mustSucceed(t, names[0])
		if len(r.recap) != 1 {
			t.Errorf("the run touched other hosts: %+v", r.recap)
		}
		checkHealthy(ctx, t, etcdctlBin, pki, hs[:1])
		if _, err := etcdctl(ctx, etcdctlBin, pki, clientURLs(hs[:1]), "put", "/kao/single", "one"); err != nil {
			t.Fatal(err)
		}
		out, err := etcdctl(ctx, etcdctlBin, pki, clientURLs(hs[:1]), "member", "list")
		if err != nil || strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Errorf("a one-member cluster lists %q (%v)", out, err)
		}
		again := a.playbook(t, inv1, vars, install)
		again.mustSucceed(t, names[0])
		if c := again.recap[names[0]].Changed; c != 0 {
			t.Errorf("the second run changed %d things:\n%s", c, again.out)
		}
		// Without purgeDataOnDelete the data stays.
		rm := a.playbook(t, inv1, vars, uninstall)
		rm.mustSucceed(t, names[0])
		if out, err := dc.Run(ctx, names[0], "test -d /srv/karmada/etcd/member && echo kept"); err != nil || strings.TrimSpace(out) != "kept" {
			t.Errorf("the uninstall removed the data although purgeDataOnDelete is false: %q, %v", out, err)
		}
	})

	// Data kao did not put there for the deployment is neither used nor
	// purged: another deployment's kept data, and a directory someone else
	// filled.
	testenv.Step(t, "refuses and never purges data it did not make", func(t *testing.T) {
		other := etcdDeployment(hs[:1], kaov1.ManagedEtcd{Version: m.Etcd, DataDir: "/srv/karmada/etcd", PurgeDataOnDelete: true})
		other.UID = "7a7a7a7a-0000-4000-8000-000000000002"
		invOther := a.inventory(t, "etcd-other.json", other)
		r := a.playbook(t, invOther, vars, install)
		r.mustFail(t, names[0], "data directory /srv/karmada/etcd belongs to another KarmadaDeployment (uid "+roleTestUID+")")
		a.playbook(t, invOther, vars, uninstall).mustSucceed(t, names[0])
		if out, err := dc.Run(ctx, names[0], "test -d /srv/karmada/etcd/member && echo kept"); err != nil || strings.TrimSpace(out) != "kept" {
			t.Errorf("another deployment's uninstall with purgeDataOnDelete removed the data: %q, %v", out, err)
		}

		if _, err := dc.Run(ctx, names[1], "mkdir -p /srv/foreign && echo precious > /srv/foreign/keep-me"); err != nil {
			t.Fatal(err)
		}
		foreign := a.inventory(t, "etcd-foreign.json", etcdDeployment(hs[1:2], kaov1.ManagedEtcd{Version: m.Etcd, DataDir: "/srv/foreign", PurgeDataOnDelete: true}))
		a.playbook(t, foreign, vars, install).mustFail(t, names[1], "data directory /srv/foreign exists and holds data that kao did not put there")
		a.playbook(t, foreign, vars, uninstall).mustSucceed(t, names[1])
		if out, err := dc.Run(ctx, names[1], "cat /srv/foreign/keep-me; systemctl is-active karmada-etcd"); !strings.Contains(out, "precious") || strings.Contains(out, "\nactive") {
			t.Errorf("the refused install or its uninstall touched /srv/foreign or started etcd: %q, %v", out, err)
		}
	})
}

// checkHealthy requires every member in hs to answer a health check from
// this machine.
func checkHealthy(ctx context.Context, t *testing.T, etcdctlBin, pki string, hs []hosts.Host) {
	t.Helper()
	out, err := etcdctl(ctx, etcdctlBin, pki, clientURLs(hs), "endpoint", "health", "--write-out=json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var health []struct {
		Endpoint string `json:"endpoint"`
		Health   bool   `json:"health"`
	}
	if err := json.Unmarshal([]byte(out), &health); err != nil {
		t.Fatalf("endpoint health: %v: %s", err, out)
	}
	healthy := 0
	for _, h := range health {
		if h.Health {
			healthy++
		}
	}
	if healthy != len(hs) {
		t.Fatalf("%d of %d members are healthy: %s", healthy, len(hs), out)
	}
}

// etcdArgv is the command line of the running etcd on host.
func etcdArgv(ctx context.Context, t *testing.T, dc *hosts.Cluster, host string) []string {
	t.Helper()
	return processArgv(ctx, t, dc, host, "karmada-etcd")
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (run with -update after an intended change):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}
