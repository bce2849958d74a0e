package pipeline

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

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

	// Sweep cleans the state directory before the first run; SetupAll
	// makes it, and the run trackers wait for it.
	Sweep *Sweep
}

// Logs keeps the logs of a deployment's ended runs, with the operator's
// retention.
func (o Options) Logs(c client.Client, reader client.Reader) *RunLogs {
	return &RunLogs{Client: c, APIReader: reader, StateDir: o.StateDir, Retention: o.LogRetention}
}
