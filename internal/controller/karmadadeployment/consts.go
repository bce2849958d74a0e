package karmadadeployment

import (
	"time"
)

const (
	// retryBase is the wait after the first failed run of a generation; it
	// doubles with every further failure.
	retryBase = 15 * time.Second

	// retryCap bounds the wait between failed runs, so a fixed cause (a host
	// back online, a Secret created) is picked up within minutes.
	retryCap = 10 * time.Minute

	// exposurePollInterval is how often kao looks again at a karmada-apiserver
	// Service that has no address yet: a load balancer usually assigns one
	// within seconds, and the install waits for it.
	exposurePollInterval = 5 * time.Second

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
