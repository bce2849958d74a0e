package roles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

// scalePlaybook runs the etcd plays of install.yml: the role on the etcd
// group (existing members converge, new hosts join one at a time), the
// removal of the members whose hosts left the group, and the retirement of
// their services on hosts still in the deployment.
const scalePlaybook = `- name: Etcd | Install the etcd cluster
  hosts: etcd
  gather_facts: false
  any_errors_fatal: true
  roles:
    - role: etcd

- name: Etcd | Remove the members of hosts that left the etcd group
  hosts: etcd
  gather_facts: false
  any_errors_fatal: true
  tasks:
    - name: Etcd | Remove the members that left
      ansible.builtin.import_role:
        name: etcd
        tasks_from: leave

- name: Etcd | Retire the old members on hosts that left the etcd group
  hosts: karmada_apiserver:karmada_control_plane:ungrouped:!etcd
  gather_facts: false
  tasks:
    - name: Etcd | Retire an old member
      ansible.builtin.import_role:
        name: etcd
        tasks_from: retire
`

// TestEtcdScale grows a managed etcd cluster from one member to three and
// five and shrinks it back to three with the etcd role, while a writer on
// this machine keeps writing to it. Each change adds or removes one member
// at a time; members that were running are never restarted; the hosts that
// left stop and lose their member's data; and every write etcd
// acknowledged is there at the end with its value.
func TestEtcdScale(t *testing.T) {
	requirePrerequisites(t)
	bundle, m := buildBundle(t)
	dc := hosts.Start(t, 5)
	hs := dc.Hosts()
	ctx := context.Background()
	pki := genEtcdPKI(t, hs)
	a := newAnsible(t, dc)
	etcdctlBin := filepath.Join(bundle, "etcd", m.Etcd, "bin", "etcdctl")
	playbook := a.writeFile(t, "scale.yml", []byte(scalePlaybook))
	vars := a.extraVars(t, "vars.json", map[string]string{"kao_artifacts_dir": bundle, "kao_pki_dir": pki})

	// withEtcd is the deployment with the etcd role on the first n hosts;
	// every host keeps the apiServer role, so a host that leaves the etcd
	// group stays in the inventory to be retired.
	withEtcd := func(n int) string {
		kd := etcdDeployment(hs, kaov1.ManagedEtcd{})
		for i := range kd.Spec.Hosts {
			if i >= n {
				kd.Spec.Hosts[i].Roles = []kaov1.HostRole{kaov1.APIServerRole}
			}
		}
		return a.inventory(t, fmt.Sprintf("etcd%d.json", n), kd)
	}
	names := func(n int) []string {
		var out []string
		for _, h := range hs[:n] {
			out = append(out, h.Name)
		}
		return out
	}
	// mainPIDs are the PIDs of the running etcd services, by host.
	mainPIDs := func(t *testing.T, n int) map[string]string {
		t.Helper()
		out := map[string]string{}
		for _, h := range names(n) {
			pid, err := dc.Run(ctx, h, "systemctl show -p MainPID --value karmada-etcd")
			if err != nil {
				t.Fatal(err)
			}
			out[h] = strings.TrimSpace(pid)
		}
		return out
	}
	// scaleTo runs the playbook for n members and checks the member list:
	// exactly the first n hosts, all started voting members, all healthy,
	// and the members that ran before still run in the same process.
	scaleTo := func(t *testing.T, from, n int) run {
		t.Helper()
		before := mainPIDs(t, min(from, n))
		r := a.playbookWithin(t, 8*time.Minute, withEtcd(n), vars, playbook)
		r.mustSucceed(t, names(n)...)
		got := memberNames(ctx, t, etcdctlBin, pki, hs[:n])
		if want := names(n); !slices.Equal(got, want) {
			t.Fatalf("members after scaling %d→%d: %v, want %v", from, n, got, want)
		}
		checkHealthy(ctx, t, etcdctlBin, pki, hs[:n])
		if after := mainPIDs(t, min(from, n)); !maps.Equal(before, after) {
			t.Errorf("scaling %d→%d restarted running members: etcd PIDs %v before, %v after", from, n, before, after)
		}
		return r
	}

	testenv.Step(t, "installs one member", func(t *testing.T) {
		a.playbook(t, withEtcd(1), vars, playbook).mustSucceed(t, names(1)...)
		checkHealthy(ctx, t, etcdctlBin, pki, hs[:1])
	})

	w := startWriter(t, pki, clientURLs(hs))

	testenv.Step(t, "grows to three members, one at a time, while the writer writes", func(t *testing.T) {
		r := scaleTo(t, 1, 3)
		if n := strings.Count(r.out, "TASK [etcd : Etcd | Join | Promote the new member once it has caught up]"); n != 2 {
			t.Errorf("the run promoted %d learners, want 2 (one per joining host):\n%s", n, r.out)
		}
	})
	testenv.Step(t, "grows to five members while the writer writes", func(t *testing.T) { scaleTo(t, 3, 5) })
	testenv.Step(t, "shrinks to three members while the writer writes", func(t *testing.T) {
		r := scaleTo(t, 5, 3)
		if n := strings.Count(r.out, "TASK [etcd : Etcd | Leave | Remove the member]"); n != 2 {
			t.Errorf("the run removed members in %d steps, want 2:\n%s", n, r.out)
		}
		for _, h := range hs[3:] {
			out, err := dc.Run(ctx, h.Name, "systemctl is-active karmada-etcd; ls -A /var/lib/karmada-etcd /etc/systemd/system/karmada-etcd.service /etc/karmada/pki/etcd 2>&1 | grep -c 'No such file'")
			if err != nil || strings.TrimSpace(out) != "inactive\n3" {
				t.Errorf("%s still has its etcd member after leaving: %q (%v)", h.Name, out, err)
			}
		}
	})
	testenv.Step(t, "converges on three members with nothing to change", func(t *testing.T) {
		r := a.playbook(t, withEtcd(3), vars, playbook)
		r.mustSucceed(t, names(3)...)
		for _, h := range hs {
			if c := r.recap[h.Name].Changed; c != 0 {
				t.Errorf("the run after the scaling changed %d things on %s:\n%s", c, h.Name, r.out)
			}
		}
	})

	acked, failed := w.stop(t)
	t.Logf("the writer wrote %d keys etcd acknowledged; %d writes failed while members joined and left", len(acked), failed)
	if len(acked) < 50 {
		t.Fatalf("the writer got only %d writes acknowledged: the test proves nothing", len(acked))
	}
	got := readPrefix(ctx, t, pki, clientURLs(hs[:3]), writerPrefix)
	lost := 0
	for k, v := range acked {
		if got[k] != v {
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged write %s=%s reads back as %q", k, v, got[k])
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged writes were lost", lost, len(acked))
	}
}

// memberNames lists the started voting members' names, sorted; it fails
// the test on a learner or a member that never started.
func memberNames(ctx context.Context, t *testing.T, etcdctlBin, pki string, hs []hosts.Host) []string {
	t.Helper()
	out, err := etcdctl(ctx, etcdctlBin, pki, clientURLs(hs), "member", "list", "--write-out=json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Members []struct {
			Name      string `json:"name"`
			IsLearner bool   `json:"isLearner"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("member list: %v: %s", err, out)
	}
	var got []string
	for _, m := range list.Members {
		if m.Name == "" || m.IsLearner {
			t.Errorf("member list has a learner or an unstarted member: %s", out)
		}
		got = append(got, m.Name)
	}
	slices.Sort(got)
	return got
}

const writerPrefix = "/kao/scale/writer/"

// writer keeps writing numbered keys through a client that knows every
// host's endpoint, and records the writes etcd acknowledged.
type writer struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	acked  map[string]string
	failed int
}

func etcdTLS(t testing.TB, pki string) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, "etcd-healthcheck-client.crt"), filepath.Join(pki, "etcd-healthcheck-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(pki, "etcd-ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
}

func etcdClient(t testing.TB, pki string, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 3 * time.Second, TLS: etcdTLS(t, pki), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// startWriter writes one key every 50 ms until stopped.
func startWriter(t *testing.T, pki string, endpoints []string) *writer {
	cli := etcdClient(t, pki, endpoints)
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{cancel: cancel, done: make(chan struct{}), acked: map[string]string{}}
	go func() {
		defer close(w.done)
		defer func() { _ = cli.Close() }()
		for i := 0; ctx.Err() == nil; i++ {
			k, v := fmt.Sprintf("%s%08d", writerPrefix, i), fmt.Sprintf("value-%d-%d", i, time.Now().UnixNano())
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := cli.Put(pctx, k, v)
			pcancel()
			w.mu.Lock()
			if err == nil {
				w.acked[k] = v
			} else if ctx.Err() == nil {
				w.failed++
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// stop ends the writer and returns its acknowledged writes and its failures.
func (w *writer) stop(t *testing.T) (map[string]string, int) {
	t.Helper()
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.failed
}

// readPrefix reads every key under prefix with a linearizable read.
func readPrefix(ctx context.Context, t *testing.T, pki string, endpoints []string, prefix string) map[string]string {
	t.Helper()
	cli := etcdClient(t, pki, endpoints)
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}
