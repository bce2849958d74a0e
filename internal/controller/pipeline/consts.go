package pipeline

import (
	"time"
)

const (
	// progressInterval is the least time between two status.progress patches of
	// one run: often enough to watch live, rare enough to spare the API server.
	progressInterval = 2 * time.Second

	// DefaultRunTimeout stops a run that hangs (a host that accepts TCP but
	// never answers SSH, a stuck package manager) so the next one can start.
	DefaultRunTimeout = 60 * time.Minute

	// DefaultMaxConcurrentProbes is how many control planes are probed at
	// once by default. A probe mostly waits on the network (a plane that
	// does not answer costs its timeouts, about 20 s), so a few workers
	// keep up with hundreds of planes probed every 30 s while few are down.
	DefaultMaxConcurrentProbes = 8

	// defaultLogRetention is how many runs' logs (ConfigMaps and run
	// directories) kao keeps per deployment.
	defaultLogRetention = 5

	// maxLogConfigMapBytes keeps a run's compressed log under the 1 MiB
	// ConfigMap limit with room for metadata.
	maxLogConfigMapBytes = 900 << 10
)
