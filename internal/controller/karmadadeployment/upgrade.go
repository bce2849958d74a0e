package karmadadeployment

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/inventory"
	"github.com/kao-io/kao/internal/runner"
)

// Pre-upgrade etcd snapshots live in their own directory next to the
// deployment's EtcdBackup snapshots (<state>/backups/<ns>/<name>/upgrades):
// no EtcdBackup writes or prunes there, and kao prunes there only its own.
const (
	upgradeBackupsDir = "upgrades"

	// upgradeBackupsKept is how many pre-upgrade snapshots kao keeps per
	// deployment: the last upgrades' starting points, enough to go back past
	// an upgrade retried a few times.
	upgradeBackupsKept = 3

	// Families of component versions: spec.version moves the Karmada
	// components, spec.kubernetesVersion kube-apiserver and
	// kube-controller-manager.
	karmadaFamily = "karmada"

	kubernetesFamily = "kubernetes"
)

// upgradeComponent is a component an upgrade moves, in upgradeOrder.
type upgradeComponent struct {
	name   string
	family string
	// role is the host role the component runs on.
	role kaov1.HostRole
	// group is the inventory group listing the hosts it moves on.
	group string
	// field is the spec field that sets its own version.
	field string
	// own reads that field.
	own func(*kaov1.KarmadaDeploymentSpec) string
}

// upgradeOrder is the order upgrade.yml moves components in: the API server
// side first, then the servers karmada-apiserver calls (the aggregated API
// server, the webhook), then its clients. Karmada's CRDs and objects move
// after kube-controller-manager and before the aggregated API server.
var upgradeOrder = []upgradeComponent{
	{"karmada-apiserver", kubernetesFamily, kaov1.APIServerRole, inventory.GroupUpgradeAPIServer, "spec.apiServer.version",
		func(s *kaov1.KarmadaDeploymentSpec) string { return s.APIServer.Version }},
	{"kube-controller-manager", kubernetesFamily, kaov1.ControlPlaneRole, inventory.GroupUpgradeKubeControllerManager,
		"spec.components.kubeControllerManager.version",
		func(s *kaov1.KarmadaDeploymentSpec) string { return s.Components.KubeControllerManager.Version }},
	{"karmada-aggregated-apiserver", karmadaFamily, kaov1.APIServerRole, inventory.GroupUpgradeAggregatedAPIServer,
		"spec.components.aggregatedAPIServer.version",
		func(s *kaov1.KarmadaDeploymentSpec) string { return s.Components.AggregatedAPIServer.Version }},
	{"karmada-webhook", karmadaFamily, kaov1.ControlPlaneRole, inventory.GroupUpgradeWebhook, "spec.components.webhook.version",
		func(s *kaov1.KarmadaDeploymentSpec) string { return s.Components.Webhook.Version }},
	{"karmada-controller-manager", karmadaFamily, kaov1.ControlPlaneRole, inventory.GroupUpgradeControllerManager,
		"spec.components.controllerManager.version",
		func(s *kaov1.KarmadaDeploymentSpec) string { return s.Components.ControllerManager.Version }},
	{"karmada-scheduler", karmadaFamily, kaov1.ControlPlaneRole, inventory.GroupUpgradeScheduler, "spec.components.scheduler.version",
		func(s *kaov1.KarmadaDeploymentSpec) string { return s.Components.Scheduler.Version }},
}

// crdsComponent names the step that applies Karmada's CRDs and objects of
// spec.version in status.upgrade.components.
const crdsComponent = "karmada-crds"

// semver is a parsed vX.Y.Z.
type semver [3]int

var semverPattern = regexp.MustCompile(`^v([0-9]+)\.([0-9]+)\.([0-9]+)$`)

// parseSemver reads vX.Y.Z; ok is false for anything else.
func parseSemver(s string) (v semver, ok bool) {
	m := semverPattern.FindStringSubmatch(s)
	if m == nil {
		return v, false
	}
	for i := range v {
		n, err := strconv.Atoi(m[i+1])
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// olderThan tells whether version a is older than b; false when either does not parse.
func olderThan(a, b string) bool {
	va, okA := parseSemver(a)
	vb, okB := parseSemver(b)
	if !okA || !okB {
		return false
	}
	return slices.Compare(va[:], vb[:]) < 0
}

// targetVersions are the versions the spec asks each component to run, with
// the bundle's defaults where the spec leaves one open (a is nil when the
// bundle cannot be read: the open ones stay unknown, "").
func targetVersions(kd *kaov1.KarmadaDeployment, a *pipeline.Artifacts) map[string]string {
	family := map[string]string{karmadaFamily: kd.Spec.Version, kubernetesFamily: kd.Spec.KubernetesVersion}
	etcd := ""
	if m := kd.Spec.Etcd.Managed; m != nil {
		etcd = m.Version
	}
	if a != nil {
		family[kubernetesFamily] = a.Kubernetes
		if etcd == "" {
			etcd = a.Etcd
		}
	}
	out := map[string]string{"etcd": etcd}
	for _, c := range upgradeOrder {
		out[c.name] = version(c.own(&kd.Spec), family[c.family])
	}
	for name, a := range enabledAddons(kd) {
		out[name] = version(a.Version, family[karmadaFamily])
	}
	return out
}

// runningVersions maps each host of a component to the version status says
// it runs; hosts status says nothing about are absent.
func runningVersions(kd *kaov1.KarmadaDeployment, name string) map[string]string {
	out := map[string]string{}
	for _, c := range kd.Status.Components {
		if c.Name != name {
			continue
		}
		for _, in := range c.Instances {
			out[in.Host] = in.Version
		}
	}
	return out
}

// knownVersions are the distinct versions a component is known to run, sorted:
// its instances' (empty ones, not running, aside), plus the component's
// version when an instance does not run or, for a status written before kao
// recorded instances, none is known.
func knownVersions(kd *kaov1.KarmadaDeployment, name string) []string {
	seen := []string{}
	stopped := false
	for _, v := range runningVersions(kd, name) {
		stopped = stopped || v == ""
		if v != "" && !slices.Contains(seen, v) {
			seen = append(seen, v)
		}
	}
	if len(seen) == 0 || stopped {
		// A host where it does not run (an upgrade stopped there) still has
		// what it ran last, the component's version.
		for _, c := range kd.Status.Components {
			if c.Name == name && c.Version != "" && !slices.Contains(seen, c.Version) {
				seen = append(seen, c.Version)
			}
		}
	}
	sort.Strings(seen)
	return seen
}

// upgradePlan is what an upgrade moves: the components, in order, with their
// hosts, and the inventory's upgrade groups.
type upgradePlan struct {
	components []kaov1.ComponentUpgrade
	groups     map[string][]string
}

// inventoryGroups are the upgrade groups for the run's inventory; nil for
// no upgrade.
func (p *upgradePlan) inventoryGroups() map[string][]string {
	if p == nil {
		return nil
	}
	return p.groups
}

// summary lists the moves in one line, for Events and messages.
func (p *upgradePlan) summary() string {
	parts := []string{}
	for _, c := range p.components {
		from := strings.Join(c.From, "/")
		if from == "" {
			from = "?"
		}
		parts = append(parts, fmt.Sprintf("%s %s -> %s", c.Name, from, c.To))
	}
	return strings.Join(parts, ", ")
}

// status is status.upgrade for the run that rolls the plan out.
func (p *upgradePlan) status(runID string, generation int64, now time.Time) *kaov1.UpgradeStatus {
	return &kaov1.UpgradeStatus{RunID: runID, Generation: generation, StartTime: metav1.NewTime(now), Components: p.components}
}

// downgradeRefused is a spec that asks a component to run a version older
// than one it runs. kao refuses it before any host is touched, and retries
// with backoff like any bad input (status.version may yet change).
func downgradeRefused(format string, args ...any) error {
	return reason.Failed(kaov1.DowngradeRefusedReason, "%s", pipeline.TruncateString(fmt.Sprintf(format, args...), 1024))
}

// planUpgrade compares the versions the spec asks for (targets) with those
// status says run and decides what an upgrade moves. It returns nil when
// nothing runs a version other than its target (an install run converges
// the rest: new hosts, etcd, configuration), and a DowngradeRefused *reason.Error when a
// target is older than a version that runs.
//
// A component moves when a host runs a version other than its target; it
// moves on its hosts that do not run the target yet (hosts status knows
// nothing about included), in spec order. Karmada's CRDs and objects move
// when spec.version differs from status.version, the version the control
// plane last reached.
func planUpgrade(kd *kaov1.KarmadaDeployment, targets map[string]string) (*upgradePlan, error) {
	if reached := kd.Status.Version; reached != "" && olderThan(kd.Spec.Version, reached) {
		return nil, downgradeRefused(
			"spec.version asks for Karmada %s, but the control plane runs %s: kao does not downgrade "+
				"(Karmada's newer CRDs and the objects stored with them are not meant for older versions); set spec.version to %s or newer",
			kd.Spec.Version, reached, reached)
	}
	for _, name := range []string{"etcd"} {
		for _, v := range knownVersions(kd, name) {
			if olderThan(targets[name], v) {
				return nil, downgradeRefused("the spec asks etcd to run %s, but it runs %s: kao does not downgrade etcd", targets[name], v)
			}
		}
	}
	plan := &upgradePlan{groups: map[string][]string{}}
	for _, g := range inventory.UpgradeGroups {
		plan.groups[g] = []string{}
	}
	for i, c := range upgradeOrder {
		if i == crdsStep {
			plan.addCRDs(kd)
		}
		target := targets[c.name]
		known := knownVersions(kd, c.name)
		if target == "" || len(known) == 0 || slices.Equal(known, []string{target}) {
			continue
		}
		for _, v := range known {
			if olderThan(target, v) {
				field := c.field
				if c.own(&kd.Spec) == "" {
					field = map[string]string{karmadaFamily: "spec.version", kubernetesFamily: "spec.kubernetesVersion"}[c.family]
				}
				return nil, downgradeRefused(
					"%s asks %s to run %s, but it runs %s: kao does not downgrade; set %s to %s or newer",
					field, c.name, target, v, field, v)
			}
		}
		running := runningVersions(kd, c.name)
		hosts := []string{}
		for _, h := range upgradeHosts(kd, c.role) {
			if running[h] != target {
				hosts = append(hosts, h)
			}
		}
		if len(hosts) == 0 {
			continue
		}
		plan.groups[c.group] = hosts
		plan.components = append(plan.components, kaov1.ComponentUpgrade{Name: c.name, From: known, To: target, Hosts: hosts})
	}
	if len(plan.components) == 0 {
		return nil, nil
	}
	return plan, nil
}

// upgradeHosts are the inventory hosts a component with the role moves on:
// the spec's hosts with the role (Binary), or the one host that stands for
// the host cluster, where its Deployment rolls out (Containerized).
func upgradeHosts(kd *kaov1.KarmadaDeployment, role kaov1.HostRole) []string {
	if kd.Spec.Mode == kaov1.ContainerizedMode {
		return []string{inventory.HostClusterHost}
	}
	hosts := []string{}
	for _, h := range pipeline.HostsWithRole(kd, role) {
		hosts = append(hosts, h.Name)
	}
	return hosts
}

// crdsStep is the index in upgradeOrder before which Karmada's CRDs and
// objects move: after the kube components, before the Karmada ones.
const crdsStep = 2

// addCRDs adds the step that applies Karmada's CRDs and objects of
// spec.version, when spec.version differs from the version the control
// plane last reached.
func (p *upgradePlan) addCRDs(kd *kaov1.KarmadaDeployment) {
	reached := kd.Status.Version
	if reached == "" || reached == kd.Spec.Version {
		return
	}
	p.groups[inventory.GroupUpgradeResources] = upgradeHosts(kd, kaov1.APIServerRole)
	p.components = append(p.components, kaov1.ComponentUpgrade{Name: crdsComponent, From: []string{reached}, To: kd.Spec.Version})
}

// decidePlaybook picks the playbook of a run that is due: upgrade.yml when
// an installed control plane runs a version the spec no longer asks for,
// install.yml otherwise. It reads the bundle like the run will (a
// mirror of spec.artifacts.url is brought up to date); a bundle problem is
// left to the run to report.
func (r *Reconciler) decidePlaybook(ctx context.Context, kd *kaov1.KarmadaDeployment) (string, *upgradePlan, error) {
	if kd.Status.Version == "" {
		return pipeline.InstallPlaybook, nil, nil
	}
	a, err := r.inputs().FetchArtifacts(ctx, kd)
	if err != nil {
		return pipeline.InstallPlaybook, nil, nil
	}
	plan, err := planUpgrade(kd, targetVersions(kd, a))
	if err != nil || plan == nil {
		return pipeline.InstallPlaybook, nil, err
	}
	return pipeline.UpgradePlaybook, plan, nil
}

// upgradeBackupDir is where a deployment's pre-upgrade snapshots are kept.
func (r *Reconciler) upgradeBackupDir(kd *kaov1.KarmadaDeployment) string {
	return filepath.Join(r.StateDir, pipeline.BackupsDir, kd.Namespace, kd.Name, upgradeBackupsDir)
}

// backupBeforeUpgrade takes an etcd snapshot with EtcdBackup's code (from a
// healthy member, checked against etcd's own hash and with the bundle's
// etcdutl) and keeps it in the state directory, where an EtcdRestore can
// take it (spec.source.path and sha256). It keeps the newest
// upgradeBackupsKept of these snapshots.
func (r *Reconciler) backupBeforeUpgrade(ctx context.Context, kd *kaov1.KarmadaDeployment, now time.Time) (*kaov1.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, pipeline.SnapshotTimeout)
	defer cancel()
	if r.StateDir == "" {
		return nil, fmt.Errorf("the operator runs without --state-dir: there is no place to keep the snapshot")
	}
	g := r.inputs()
	src, err := g.EtcdSourceOf(ctx, kd)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	etcdutl, err := g.EtcdutlFor(src.Version)
	if err != nil {
		return nil, err
	}
	dir := r.upgradeBackupDir(kd)
	if err := pipeline.PrivateDir(filepath.Join(r.StateDir, pipeline.BackupsDir), dir); err != nil {
		return nil, err
	}
	name := pipeline.TruncateString(kd.Name, 200) + "-" + now.UTC().Format(pipeline.SnapshotTimeFormat) + ".db"
	partial := filepath.Join(dir, "."+name+".partial")
	defer func() { _ = os.Remove(partial) }()
	saved, member, status, err := pipeline.StreamSnapshot(ctx, r.etcdProber(), src, etcdutl, partial, g.SnapshotLimits())
	if err != nil {
		return nil, err
	}
	final := filepath.Join(dir, name)
	if _, err := os.Lstat(final); err == nil {
		return nil, fmt.Errorf("%s exists already: kao never overwrites a snapshot", final)
	}
	if err := os.Rename(partial, final); err != nil {
		return nil, fmt.Errorf("storing the snapshot: %w", err)
	}
	if err := pipeline.SyncDir(dir); err != nil {
		return nil, err
	}
	if err := pruneUpgradeBackups(dir, upgradeBackupsKept); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Pruning old pre-upgrade snapshots", "dir", dir)
	}
	return &kaov1.Snapshot{
		Name: name, Location: final, Size: *resource.NewQuantity(saved.Size, resource.BinarySI), SHA256: saved.SHA256,
		Revision: status.Revision, Member: pipeline.TruncateString(member.Name, 253), Time: metav1.NewTime(now),
	}, nil
}

// upgradeWithoutBackup tells whether the deployment's annotation lets this
// upgrade start without a snapshot: it names the spec.version of the run.
func upgradeWithoutBackup(kd *kaov1.KarmadaDeployment) bool {
	v, ok := kd.Annotations[kaov1.UpgradeWithoutBackupAnnotation]
	return ok && v == kd.Spec.Version
}

// pruneUpgradeBackups keeps the newest keep snapshots of a pre-upgrade
// snapshot directory (their names end in a sortable UTC time).
func pruneUpgradeBackups(dir string, keep int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	names := []string{}
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".db") && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Slice(names, func(i, j int) bool { return snapshotTime(names[i]) < snapshotTime(names[j]) })
	var errs []string
	for i := 0; i < len(names)-keep; i++ {
		if err := os.Remove(filepath.Join(dir, names[i])); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// snapshotTime is the time part of a snapshot name (<name>-<UTC time>.db).
func snapshotTime(name string) string {
	base := strings.TrimSuffix(name, ".db")
	return base[strings.LastIndexByte(base, '-')+1:]
}

// withUpgradeBackup wraps the playbook runner of an upgrade: the etcd
// snapshot comes first, recorded in status.upgrade.backup and an Event; when
// it fails the playbook does not run and the run fails saying why.
// backupFailed is set then.
func (r *Reconciler) withUpgradeBackup(kd *kaov1.KarmadaDeployment, run pipeline.PlaybookRunner, backupFailed *bool) pipeline.PlaybookRunner {
	return func(ctx context.Context, spec runner.Spec) (*runner.Result, error) {
		start := r.Clock.Now()
		if upgradeWithoutBackup(kd) {
			r.Recorder.Eventf(kd, nil, corev1.EventTypeWarning, kaov1.UpgradeBackupSkippedReason, "Upgrade",
				"Upgrading without an etcd snapshot, as annotation %s=%s asks: %s", kaov1.UpgradeWithoutBackupAnnotation, kd.Spec.Version,
				pipeline.TruncateString(upgradeSummary(kd), 400))
			return withStopMessage(kd, run)(ctx, spec)
		}
		snap, err := r.backupBeforeUpgrade(ctx, kd, start)
		if err != nil {
			*backupFailed = true
			msg := pipeline.TruncateString("the etcd snapshot kao takes before an upgrade failed, so the upgrade did not start "+
				"and nothing changed on the hosts: "+runner.NewRedactor(spec.Redact...).Clean(err.Error(), 600), 1000)
			r.Recorder.Eventf(kd, nil, corev1.EventTypeWarning, kaov1.UpgradeBackupFailedReason, "Upgrade", "%s", msg)
			return &runner.Result{ID: spec.ID, Playbook: filepath.Base(spec.Playbook), Outcome: runner.Failed, Message: msg,
				ExitCode: -1, StartTime: start, EndTime: r.Clock.Now()}, nil
		}
		if err := r.statusWriter().Update(ctx, kd, func(cur *kaov1.KarmadaDeployment) {
			if cur.Status.Upgrade != nil && cur.Status.Upgrade.RunID == spec.ID {
				cur.Status.Upgrade.Backup = snap
			}
		}); err != nil {
			ctrl.Log.WithName("run").Error(err, "Recording the pre-upgrade snapshot", "run", spec.ID)
		}
		r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "UpgradeBackupTaken", "Upgrade",
			"Took etcd snapshot %s (revision %d, sha256 %s) before upgrading: %s", snap.Location, snap.Revision, snap.SHA256,
			pipeline.TruncateString(upgradeSummary(kd), 400))
		return withStopMessage(kd, run)(ctx, spec)
	}
}

// withStopMessage wraps an upgrade's playbook runner: a failed run's
// message starts with where the upgrade stopped.
func withStopMessage(kd *kaov1.KarmadaDeployment, run pipeline.PlaybookRunner) pipeline.PlaybookRunner {
	return func(ctx context.Context, spec runner.Spec) (*runner.Result, error) {
		res, err := run(ctx, spec)
		if err == nil && res.Outcome == runner.Failed {
			if where := upgradeStopMessage(kd.Status.Upgrade, res); where != "" {
				res.Message = pipeline.TruncateString(where+"; "+res.Message, 1000)
			}
		}
		return res, err
	}
}

// recordRunVersions records what a finished run tells about versions: the
// versions its hosts reported, no version for the instance whose step
// stopped an upgrade, each component's version and target, and for an
// upgrade its completion, or that its backup failed.
func (r *Reconciler) recordRunVersions(cur, ran *kaov1.KarmadaDeployment, res *runner.Result, backupFailed bool) {
	recordReportedVersions(cur, res.CustomStats)
	if u := cur.Status.Upgrade; u != nil && u.RunID == res.ID && res.Outcome != runner.Succeeded {
		// The step that stopped the upgrade was replacing the component on
		// that host and did not bring it back: no version is known to run
		// there until the host reports or answers one again.
		if c, i, ok := upgradeStop(u, res); ok {
			setInstanceVersion(cur, c.Name, c.Hosts[i], "")
		}
	}
	if ran.Spec.Mode == kaov1.ContainerizedMode && res.Outcome == runner.Succeeded &&
		(res.Playbook == pipeline.InstallPlaybook || res.Playbook == pipeline.UpgradePlaybook) {
		// The run waited for every workload's rollout: each runs the version
		// the run applied, before the next probe reads it from the
		// workloads (a plan made before that probe must not move them again).
		ranWith, _ := r.inputs().ObservedArtifacts(ran)
		recordRolledOutVersions(cur, targetVersions(ran, ranWith))
	}
	a, _ := r.inputs().ObservedArtifacts(cur) // nil when the bundle went away: targets left open stay unknown
	summarizeVersions(cur, targetVersions(cur, a))
	u := cur.Status.Upgrade
	if u == nil || u.RunID != res.ID {
		return
	}
	switch {
	case backupFailed:
		setCondition(cur, kaov1.PlaybookSucceededCondition, metav1.ConditionFalse, kaov1.UpgradeBackupFailedReason,
			pipeline.TruncateString(res.Message, 1024))
	case res.Outcome == runner.Succeeded && ran.Generation == u.Generation:
		u.CompletionTime = pipeline.TimePtr(res.EndTime)
	}
}

// recordRolledOutVersions sets the version of each component status lists
// to the one a successful Containerized run rolled out (versions left
// unknown, "", change nothing).
func recordRolledOutVersions(kd *kaov1.KarmadaDeployment, rolledOut map[string]string) {
	for i := range kd.Status.Components {
		if v := rolledOut[kd.Status.Components[i].Name]; v != "" {
			kd.Status.Components[i].Version = v
		}
	}
}

// upgradeSummary is status.upgrade's moves in one line.
func upgradeSummary(kd *kaov1.KarmadaDeployment) string {
	if kd.Status.Upgrade == nil {
		return ""
	}
	return (&upgradePlan{components: kd.Status.Upgrade.Components}).summary()
}

// versionReport is what kao_common's versions.yml reports per host.
type versionReport struct {
	Versions map[string]string `json:"kao_versions"`
}

// recordReportedVersions copies the versions a run's hosts reported into
// status.components[].instances, for hosts that still have the
// component's role.
func recordReportedVersions(kd *kaov1.KarmadaDeployment, stats map[string]json.RawMessage) {
	enabled := enabledAddons(kd)
	for _, host := range pipeline.SortedKeys(stats) {
		rep := versionReport{}
		if err := json.Unmarshal(stats[host], &rep); err != nil {
			continue
		}
		for name, v := range rep.Versions {
			if _, ok := parseSemver(v); !ok && v != "" {
				continue
			}
			if !slices.Contains(componentHostNames(kd, name), host) {
				continue
			}
			if disabledAddon(name, enabled) {
				// Being removed by this run, or left over: not listed.
				continue
			}
			setInstanceVersion(kd, name, host, v)
		}
	}
}

// componentHostNames are the hosts a component runs on according to the spec.
func componentHostNames(kd *kaov1.KarmadaDeployment, name string) []string {
	role := kaov1.ControlPlaneRole
	switch name {
	case "etcd":
		role = kaov1.EtcdRole
	case "karmada-apiserver", "karmada-aggregated-apiserver":
		role = kaov1.APIServerRole
	}
	out := []string{}
	for _, h := range pipeline.HostsWithRole(kd, role) {
		out = append(out, h.Name)
	}
	return out
}

// setInstanceVersion records the version a host runs, adding the component
// to status when it is not listed yet.
func setInstanceVersion(kd *kaov1.KarmadaDeployment, name, host, v string) {
	i := slices.IndexFunc(kd.Status.Components, func(c kaov1.ComponentStatus) bool { return c.Name == name })
	if i < 0 {
		// A component a run just installed (an addon): the next probe says
		// whether it is ready.
		kd.Status.Components = append(kd.Status.Components, kaov1.ComponentStatus{Name: name, Hosts: componentHostNames(kd, name),
			Message: "not probed yet"})
		i = len(kd.Status.Components) - 1
	}
	c := &kd.Status.Components[i]
	j := slices.IndexFunc(c.Instances, func(in kaov1.ComponentInstance) bool { return in.Host == host })
	if j < 0 {
		c.Instances = append(c.Instances, kaov1.ComponentInstance{Host: host})
		j = len(c.Instances) - 1
	}
	c.Instances[j].Version = v
}

// summarizeVersions sets each component's version (what its instances run:
// their common version, or the oldest while they differ) and targetVersion
// (the spec's, when it differs), keeping instances of hosts that still have
// the component in spec order.
func summarizeVersions(kd *kaov1.KarmadaDeployment, targets map[string]string) {
	// An addon spec.addons no longer enables is gone (or going) from the
	// hosts: status stops listing it at once, not at the next probe.
	enabled := enabledAddons(kd)
	kd.Status.Components = slices.DeleteFunc(kd.Status.Components, func(c kaov1.ComponentStatus) bool {
		return disabledAddon(c.Name, enabled)
	})
	for i := range kd.Status.Components {
		c := &kd.Status.Components[i]
		hosts := componentHostNames(kd, c.Name)
		kept := []kaov1.ComponentInstance{}
		for _, h := range hosts {
			if j := slices.IndexFunc(c.Instances, func(in kaov1.ComponentInstance) bool { return in.Host == h }); j >= 0 {
				kept = append(kept, c.Instances[j])
			}
		}
		c.Instances = kept
		oldest := ""
		for _, in := range kept {
			if in.Version != "" && (oldest == "" || olderThan(in.Version, oldest)) {
				oldest = in.Version
			}
		}
		if oldest != "" {
			c.Version = oldest
		}
		c.TargetVersion = ""
		if t := targets[c.Name]; t != "" && t != c.Version {
			c.TargetVersion = t
		}
	}
}

// carryVersions moves what status knew about the versions components run
// into a newly probed component list (probes rebuild the list; versions come
// from runs and from the API servers' /version): the instances of each
// component, and its version when no instance reports one.
func carryVersions(prev, next []kaov1.ComponentStatus) {
	for i := range next {
		j := slices.IndexFunc(prev, func(c kaov1.ComponentStatus) bool { return c.Name == next[i].Name })
		if j < 0 {
			continue
		}
		for _, in := range prev[j].Instances {
			if !slices.ContainsFunc(next[i].Instances, func(n kaov1.ComponentInstance) bool { return n.Host == in.Host }) {
				next[i].Instances = append(next[i].Instances, in)
			}
		}
		if next[i].Version == "" {
			next[i].Version = prev[j].Version
		}
	}
}

// upgradePlay maps upgrade.yml's play names to the components they move:
// "one host at a time" (Binary) or "in the host cluster" (Containerized).
var upgradePlay = regexp.MustCompile(`^Upgrade \| ([a-z-]+), (?:one host at a time|in the host cluster)$`)

// upgradeStopMessage says where a failed upgrade stopped: the component and
// host of its first failure, the hosts of that component already moved and
// those left on their old version. Empty when the failure was not in a
// step of the rollout.
func upgradeStopMessage(u *kaov1.UpgradeStatus, res *runner.Result) string {
	c, i, ok := upgradeStop(u, res)
	if !ok {
		return ""
	}
	if c.Hosts[i] == inventory.HostClusterHost {
		return fmt.Sprintf("the upgrade stopped at %s, whose Deployment did not roll out to %s healthy "+
			"(Kubernetes keeps its old pods serving until new ones are ready); not touched: every component after %s",
			c.Name, c.To, c.Name)
	}
	done, left := strings.Join(c.Hosts[:i], ", "), strings.Join(c.Hosts[i+1:], ", ")
	if done == "" {
		done = "none"
	}
	if left == "" {
		left = "none"
	}
	return fmt.Sprintf("the upgrade stopped at %s on %s (moved to %s before it: %s; not touched: %s, and every component after %s)",
		c.Name, c.Hosts[i], c.To, done, left, c.Name)
}

// upgradeStop finds the step of the rollout where a failed upgrade run
// stopped: the component moving and the index of the host of its first
// failure in that component's hosts. ok is false when the failure was not in
// a step of the rollout.
func upgradeStop(u *kaov1.UpgradeStatus, res *runner.Result) (c kaov1.ComponentUpgrade, host int, ok bool) {
	if u == nil || len(res.FailedTasks) == 0 {
		return c, 0, false
	}
	f := res.FailedTasks[0]
	m := upgradePlay.FindStringSubmatch(f.Play)
	if m == nil {
		return c, 0, false
	}
	for _, c := range u.Components {
		if c.Name != m[1] {
			continue
		}
		if i := slices.Index(c.Hosts, f.Host); i >= 0 {
			return c, i, true
		}
		break
	}
	return c, 0, false
}
