package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

// The churn test's knobs, from the environment: a failure prints the seed,
// and KAO_CHURN_SEED replays it.
const (
	// churnSeedEnv fixes the seed of the random sequence.
	churnSeedEnv = "KAO_CHURN_SEED"
	// churnStepsEnv sets the number of steps: 30 in CI, more on demand.
	churnStepsEnv = "KAO_CHURN_STEPS"
	// churnPlaybooksEnv set to "real" runs kao's own playbooks instead of
	// the stand-ins (a step then takes a real install: minutes, not seconds).
	churnPlaybooksEnv = "KAO_CHURN_PLAYBOOKS"
	// churnDefaultSteps is the CI length.
	churnDefaultSteps = 30
)

// churnSettle bounds the wait for a step to settle: every deletion done,
// every live deployment's current generation run to its end.
const churnSettle = 3 * time.Minute

// TestChurn drives the real operator (cmd/manager as its own process, with
// real ansible-playbook over SSH to two test hosts) through a seeded random
// sequence of what GitOps tools, scripts and people do to deployments:
// create, spec edits, annotation changes, pause and unpause, delete,
// re-create under the same name, and operator kills and restarts, each at a
// random moment of the run the step started. After every step settles it
// checks:
//
//   - nothing is stuck: every deletion completes, every live deployment
//     that is not paused finishes a successful run of its current generation;
//   - at most one ansible-playbook ran per deployment at any moment
//     (sampled throughout);
//   - a deleted deployment left nothing on its host: no unit, no owner marker;
//   - status agrees with the last run: status.lastRun is the deployment's
//     newest run directory, and its log ConfigMap exists;
//   - no secret file is on disk once no run is under way.
//
// The playbooks are stand-ins (testdata/churn): the real preflight role
// (which claims the host) and a unit of the deployment's own, a few seconds
// long, so that 30 steps fit in CI; KAO_CHURN_PLAYBOOKS=real uses kao's own.
func TestChurn(t *testing.T) {
	longTest(t) // see the package doc: long tests share the machine's test lanes, longest first
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(churnSeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q is not a number", churnSeedEnv, s)
		}
		seed = v
	}
	steps := churnDefaultSteps
	if s := os.Getenv(churnStepsEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("%s=%q is not a positive number", churnStepsEnv, s)
		}
		steps = v
	}
	playbooks := filepath.Join(testenv.RepoRoot(), "test", "e2e", "testdata", "churn")
	if os.Getenv(churnPlaybooksEnv) == "real" {
		playbooks = filepath.Join(testenv.RepoRoot(), "playbooks")
	}
	t.Logf("churn: seed %d, %d steps, playbooks %s (replay: %s=%d %s=%d)", seed, steps, playbooks, churnSeedEnv, seed, churnStepsEnv, steps)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("churn failed with seed %d: replay with %s=%d %s=%d go test ./test/e2e/ -run TestChurn", seed, churnSeedEnv, seed, churnStepsEnv, steps)
		}
	})

	dc := hosts.Start(t, 2)
	ns := newNamespace(t)
	stateDir := testenv.StateDir(t)
	createSSHSecret(t, ns, "churn-ssh", dc)
	c := &churn{
		t: t, dc: dc, ns: ns, stateDir: stateDir, playbooks: playbooks,
		rnd:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		slots: []*churnSlot{{name: "dc-a", host: dc.Hosts()[0]}, {name: "dc-b", host: dc.Hosts()[1]}},
	}
	c.operator = c.startOperator()
	stopSampler := c.sampleRuns()
	defer stopSampler()

	for i := range steps {
		what := c.step()
		t.Logf("step %d/%d: %s", i+1, steps, what)
		c.settle(fmt.Sprintf("step %d (%s)", i+1, what))
		c.check(fmt.Sprintf("step %d (%s)", i+1, what))
		if t.Failed() {
			return
		}
	}
	// Last, every deployment goes: nothing may be left.
	for _, s := range c.slots {
		if s.live() {
			c.delete(s)
		}
	}
	c.settle("the final deletions")
	c.check("the final deletions")
	t.Logf("churn: %d steps, %d operator restarts, %d runs seen, at most %d ansible-playbook per deployment at once",
		steps, c.restarts, c.runsSeen(), c.maxConcurrent())
}

// churn is the state of one churn test.
type churn struct {
	t         *testing.T
	dc        *hosts.Cluster
	ns        string
	stateDir  string
	playbooks string
	rnd       *rand.Rand
	slots     []*churnSlot
	operator  *operatorProcess
	restarts  int

	mu sync.Mutex
	// concurrent is the most ansible-playbook processes seen at once per
	// deployment UID; runs the run directories seen.
	concurrent map[string]int
	runs       map[string]bool
}

// churnSlot is one deployment name on one host; the object comes and goes.
type churnSlot struct {
	name string
	host hosts.Host
	// kd is the live object, nil when none; gone the UIDs deleted since the
	// last check.
	kd      *kaov1.KarmadaDeployment
	deleted []*kaov1.KarmadaDeployment
	edits   int
}

func (s *churnSlot) live() bool { return s.kd != nil }

// startOperator starts cmd/manager with the churn's playbooks.
func (c *churn) startOperator() *operatorProcess {
	c.restarts++
	return startOperatorProcess(c.t, c.ns, c.stateDir, fmt.Sprintf("operator-%d", c.restarts), "--playbook-dir="+c.playbooks)
}

// step applies one random action, and with even odds a second one at a
// random moment of the run the first started.
func (c *churn) step() string {
	s := c.slots[c.rnd.IntN(len(c.slots))]
	what := c.act(s)
	if c.rnd.IntN(2) == 0 {
		time.Sleep(time.Duration(c.rnd.IntN(4000)) * time.Millisecond)
		what += ", then " + c.act(c.slots[c.rnd.IntN(len(c.slots))])
	}
	return what
}

// act applies one random action to a slot.
func (c *churn) act(s *churnSlot) string {
	if !s.live() {
		c.create(s)
		return "create " + s.name
	}
	switch c.rnd.IntN(7) {
	case 0:
		s.edits++
		c.update(s, func(kd *kaov1.KarmadaDeployment) {
			kd.Spec.Components.Scheduler.ExtraArgs = []kaov1.Arg{{Name: "v", Value: strconv.Itoa(s.edits)}}
		})
		return fmt.Sprintf("edit %s's spec (edit %d)", s.name, s.edits)
	case 1:
		value := strconv.Itoa(c.rnd.IntN(1 << 20))
		c.update(s, func(kd *kaov1.KarmadaDeployment) {
			if kd.Annotations == nil {
				kd.Annotations = map[string]string{}
			}
			kd.Annotations["kao.io/rotate-certificates"] = value
		})
		return "ask " + s.name + " to rotate its certificates"
	case 2:
		paused := false
		c.update(s, func(kd *kaov1.KarmadaDeployment) { kd.Spec.Paused = !kd.Spec.Paused; paused = kd.Spec.Paused })
		if paused {
			return "pause " + s.name
		}
		return "unpause " + s.name
	case 3:
		c.delete(s)
		return "delete " + s.name
	case 4:
		c.delete(s)
		c.create(s)
		return "delete " + s.name + " and create it again at once"
	default:
		c.operator.kill(c.t, c.stateDir)
		c.operator = c.startOperator()
		return "kill and restart the operator"
	}
}

// create makes the slot's deployment, as soon as the API server takes it:
// once a deletion of the same name is complete.
func (c *churn) create(s *churnSlot) {
	for _, gone := range s.deleted {
		testenv.WaitReleased(c.t, k8s, gone, churnSettle)
	}
	kd := binaryDeployment(c.ns, s.name, "churn-ssh", []hosts.Host{s.host})
	kd.Spec.Hosts[0].Roles = []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}
	kd.Spec.SSH.ConnectTimeoutSeconds = 5
	kd.Spec.Etcd.Managed.PurgeDataOnDelete = true
	if err := k8s.Create(context.Background(), kd); err != nil {
		c.t.Fatalf("creating %s: %v", s.name, err)
	}
	s.kd = kd
}

func (c *churn) update(s *churnSlot, change func(*kaov1.KarmadaDeployment)) {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := get(c.t, s.kd)
		change(cur)
		return k8s.Update(context.Background(), cur)
	})
	if err != nil {
		c.t.Fatalf("updating %s: %v", s.name, err)
	}
}

func (c *churn) delete(s *churnSlot) {
	if err := k8s.Delete(context.Background(), s.kd); err != nil && !apierrors.IsNotFound(err) {
		c.t.Fatalf("deleting %s: %v", s.name, err)
	}
	s.deleted = append(s.deleted, s.kd)
	s.kd = nil
}

// settle waits until every deleted deployment is released and every live
// one that is not paused finished a successful run of its current
// generation, or is paused with no run under way.
func (c *churn) settle(when string) {
	c.t.Helper()
	for _, s := range c.slots {
		for _, kd := range s.deleted {
			testenv.WaitReleased(c.t, k8s, kd, churnSettle)
		}
		if !s.live() {
			continue
		}
		deadline := time.Now().Add(churnSettle)
		for {
			cur := get(c.t, s.kd)
			last := cur.Status.LastRun
			paused := meta.IsStatusConditionTrue(cur.Status.Conditions, kaov1.PausedCondition) && cur.Spec.Paused
			// A rotation request is settled once a run handled it.
			rotation := cur.Annotations["kao.io/rotate-certificates"]
			rotated := rotation == "" || cur.Status.CertificateRenewal != nil && cur.Status.CertificateRenewal.RotationRequest == rotation
			done := cur.Status.Progress == nil && last != nil && last.Generation == cur.Generation && last.Result == kaov1.RunSucceeded &&
				cur.Status.ObservedGeneration == cur.Generation && rotated
			if done || paused && cur.Status.Progress == nil {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("%s: stuck: %s did not settle within %s (generation %d, lastRun %+v, progress %+v, conditions %+v)",
					when, s.name, churnSettle, cur.Generation, last, cur.Status.Progress, cur.Status.Conditions)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// check checks the invariants once the step settled.
func (c *churn) check(when string) {
	c.t.Helper()
	ctx := context.Background()
	if n := c.maxConcurrent(); n > 1 {
		c.t.Errorf("%s: %d ansible-playbook processes ran at once for one deployment", when, n)
	}
	for _, s := range c.slots {
		// A deleted deployment left nothing on its host, unless the slot's
		// next object already claimed it.
		if len(s.deleted) > 0 && !s.live() {
			out, err := c.dc.Run(ctx, s.host.Name, "ls /etc/systemd/system/kao-churn.service /etc/kao/owner 2>/dev/null; systemctl is-active kao-churn.service || true")
			if err != nil || strings.TrimSpace(strings.ReplaceAll(out, "inactive", "")) != "" {
				c.t.Errorf("%s: the deleted %s left %q on %s (%v)", when, s.name, out, s.host.Name, err)
			}
		}
		s.deleted = nil
		if !s.live() {
			continue
		}
		cur := get(c.t, s.kd)
		last := cur.Status.LastRun
		if last == nil {
			continue // paused before its first run
		}
		runs, _ := os.ReadDir(filepath.Join(c.stateDir, "runs", string(cur.UID)))
		names := []string{}
		for _, r := range runs {
			names = append(names, r.Name())
		}
		slices.Sort(names)
		if len(names) == 0 || names[len(names)-1] != last.ID {
			c.t.Errorf("%s: %s's status.lastRun is run %s, but its newest run directory is %v", when, s.name, last.ID, names)
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: last.LogConfigMapName}, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}); err != nil {
			c.t.Errorf("%s: %s's last run %s has no log ConfigMap %q: %v", when, s.name, last.ID, last.LogConfigMapName, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(c.stateDir, "runs", "*", "*", "secrets")); len(left) > 0 {
		c.t.Errorf("%s: secret files are on disk with no run under way: %v", when, left)
	}
}

// sampleRuns watches the ansible-playbook processes of the state directory
// until stopped, counting them per deployment (its run directory's UID).
func (c *churn) sampleRuns() (stop func()) {
	c.concurrent, c.runs = map[string]int{}, map[string]bool{}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			perUID := map[string]int{}
			for _, dir := range ansibleRunDirs(c.stateDir) {
				uid := filepath.Base(filepath.Dir(dir))
				perUID[uid]++
				c.mu.Lock()
				c.runs[dir] = true
				c.mu.Unlock()
			}
			c.mu.Lock()
			for uid, n := range perUID {
				c.concurrent[uid] = max(c.concurrent[uid], n)
			}
			c.mu.Unlock()
		}
	}()
	return func() { close(done); <-stopped }
}

func (c *churn) maxConcurrent() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.concurrent {
		n = max(n, v)
	}
	return n
}

func (c *churn) runsSeen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.runs)
}

// ansibleRunDirs lists the run directory of every ansible-playbook process
// that runs for stateDir (its ANSIBLE_CONFIG is <run directory>/ansible.cfg),
// one per playbook run: the workers ansible-playbook forks are left out.
func ansibleRunDirs(stateDir string) []string {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	playbook := map[string]string{} // pid → run directory
	parent := map[string]string{}
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), "ansible-playbook") {
			continue
		}
		env, err := os.ReadFile(filepath.Join(p, "environ"))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if cfg, ok := strings.CutPrefix(kv, "ANSIBLE_CONFIG="); ok && strings.HasPrefix(cfg, stateDir+"/") {
				playbook[filepath.Base(p)] = filepath.Dir(cfg)
			}
		}
		if stat, err := os.ReadFile(filepath.Join(p, "stat")); err == nil {
			// pid (comm) state ppid ...: the command may hold spaces.
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
				if f := strings.Fields(string(stat)[i+1:]); len(f) > 1 {
					parent[filepath.Base(p)] = f[1]
				}
			}
		}
	}
	out := []string{}
	for pid, dir := range playbook {
		if _, forked := playbook[parent[pid]]; !forked {
			out = append(out, dir)
		}
	}
	return out
}
