package pipeline

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/jobexec"
	"github.com/kao-io/kao/internal/runner"
)

// RemoteExecutor runs playbooks away from the operator's process, where a
// run outlives the operator: Run has runner.Run's contract (with
// spec.Attach it follows a run an earlier process started), and Find tells
// whether such a run exists, with the meta data it started with. It runs
// tasks other than playbooks too (an etcd backup's snapshot), which the
// operator starts and later looks at, from whichever process then runs.
type RemoteExecutor interface {
	Run(ctx context.Context, spec runner.Spec) (*runner.Result, error)
	Find(ctx context.Context, owner runner.Owner, runID string) (map[string]string, bool, error)
	StartTask(ctx context.Context, t jobexec.Task) error
	TaskState(ctx context.Context, owner runner.Owner, id string) (jobexec.TaskState, bool, error)
	RemoveTask(ctx context.Context, owner runner.Owner, id string) error
}

// InProcessReason says why a deployment's runs take place in the operator's
// process even with a remote executor, or "" when they need not: a run that
// needs what only the operator's pod has. The operator's own credentials (a
// host cluster reached with spec.hostCluster.inCluster) never go into a
// tenant's namespace, and a bundle mirrored on, or mounted into, the
// operator's pod is not in a Job's.
func (o Options) InProcessReason(kd *kaov1.KarmadaDeployment) string {
	switch {
	case kd.Spec.HostCluster != nil && kd.Spec.HostCluster.InCluster:
		return "spec.hostCluster.inCluster runs with the operator's own credentials"
	case kd.Spec.Artifacts.URL != "":
		return "the bundle of spec.artifacts.url is mirrored on the operator's state volume"
	case kd.Spec.Artifacts.LocalPath != "" && (o.ArtifactsDir == "" || !isOrUnder(filepath.Clean(kd.Spec.Artifacts.LocalPath), o.ArtifactsDir)):
		return "spec.artifacts.localPath lies outside the image's bundle directory " + strings.TrimSuffix(o.ArtifactsDir, "/")
	}
	return ""
}

// Options configure kao's controllers.
type Options struct {
	// StateDir holds run directories and fact caches.
	StateDir string
	// PlaybookDir holds the entry playbooks.
	PlaybookDir string
	// RolesPath lists role directories.
	RolesPath []string
	// ArtifactsDir is the default offline bundle for Binary deployments.
	ArtifactsDir string
	// MaxForks caps Ansible's parallelism per run.
	MaxForks int
	// RunTimeout stops a run that takes longer; DefaultRunTimeout when zero.
	RunTimeout time.Duration
	// LogRetention is how many run logs are kept per deployment.
	LogRetention int
	// MaxConcurrentReconciles bounds parallel reconciles per kind.
	MaxConcurrentReconciles int
	// ProbeInterval is how often installed control planes are probed; the KarmadaDeployment controller's default when zero.
	ProbeInterval time.Duration
	// MaxConcurrentProbes bounds the control planes probed at once. Probes
	// have workers of their own, apart from the reconciles that start
	// runs, so planes that do not answer never delay an install;
	// DefaultMaxConcurrentProbes when zero.
	MaxConcurrentProbes int
	// UserRolesDir is the directory user roles given by path
	// (spec.addons.userRoles[].path) must lie under; empty refuses them all.
	UserRolesDir string
	// ConfigMapUserRoles allows user roles from ConfigMaps
	// (spec.addons.userRoles[].configMapName). Such a role runs with the
	// operator's rights, so whoever may write a KarmadaDeployment or the
	// ConfigMap gets them: off unless the operator's administrator allows it.
	ConfigMapUserRoles bool
	// MaxSnapshotBytes is the largest etcd snapshot kao takes;
	// etcdsnapshot.DefaultMaxBytes when zero. Free space is checked too.
	MaxSnapshotBytes int64
	// Policy is what the administrator lets tenants' specs ask for.
	Policy
	// RunLimits bound the KarmadaDeployment runs in progress at once, in
	// total and per namespace; the others wait with condition RunQueued.
	RunLimits RunLimits
	// Remote runs KarmadaDeployments' playbooks away from the operator's
	// process (as Jobs, --executor=job); nil runs them in the process.
	Remote RemoteExecutor

	// Sweep cleans the state directory before the first run; SetupAll
	// makes it, and the run trackers wait for it.
	Sweep *Sweep
}

// Logs keeps the logs of a deployment's ended runs, with the operator's
// retention.
func (o Options) Logs(c client.Client, reader client.Reader) *RunLogs {
	return &RunLogs{Client: c, APIReader: reader, StateDir: o.StateDir, Retention: o.LogRetention}
}
