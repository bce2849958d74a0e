package controllers

import "time"

const (
	// progressInterval is the least time between two status.progress patches of
	// one run: often enough to watch live, rare enough to spare the API server.
	progressInterval = 2 * time.Second

	// retryBase is the wait after the first failed run of a generation; it
	// doubles with every further failure.
	retryBase = 15 * time.Second

	// retryCap bounds the wait between failed runs, so a fixed cause (a host
	// back online, a Secret created) is picked up within minutes.
	retryCap = 10 * time.Minute

	// defaultRunTimeout stops a run that hangs (a host that accepts TCP but
	// never answers SSH, a stuck package manager) so the next one can start.
	defaultRunTimeout = 60 * time.Minute

	// defaultLogRetention is how many runs' logs (ConfigMaps and run
	// directories) kao keeps per deployment.
	defaultLogRetention = 5

	// exposurePollInterval is how often kao looks again at a karmada-apiserver
	// Service that has no address yet: a load balancer usually assigns one
	// within seconds, and the install waits for it.
	exposurePollInterval = 5 * time.Second

	// maxLogConfigMapBytes keeps a run's compressed log under the 1 MiB
	// ConfigMap limit with room for metadata.
	maxLogConfigMapBytes = 900 << 10

	// userRolesRecheck is how often kao reads the files of an installed
	// deployment's user roles again to notice a change: often enough that an
	// edited ConfigMap runs within a minute, rare enough to cost little (a
	// ConfigMap read, or a small directory walk, per role).
	userRolesRecheck = 30 * time.Second

	// minRenewalRequeue is the shortest wait for a certificate's renewal
	// window: certificates carry whole seconds, so an earlier wake-up would
	// find nothing due yet.
	minRenewalRequeue = time.Second
)
