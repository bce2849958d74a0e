package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/runner"
)

// Sweep cleans the state directory when the operator becomes the
// leader, before any run starts: the secret files of runs a crashed process
// never finished (a run removes its own when it ends), and the run
// directories, fact caches and fetched snapshots of objects that no longer
// exist. Backups are never touched.
//
// The run trackers wait for it (done), so no run of this process can be
// under way while it removes files.
type Sweep struct {
	stateDir string
	// reader lists the objects the operator watches (the manager's cache).
	reader client.Reader
	// Done is closed when the sweep has ended.
	Done chan struct{}
}

// NewSweep makes the sweep of a state directory; SetupAll adds it to the
// manager, and every controller's run tracker waits for it.
func NewSweep(stateDir string, reader client.Reader) *Sweep {
	return &Sweep{stateDir: stateDir, reader: reader, Done: make(chan struct{})}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// leader runs playbooks, so only the leader may clean up after them.
func (s *Sweep) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable. A failure is logged, never fatal: the
// trackers go on, and the next leader sweeps again.
func (s *Sweep) Start(ctx context.Context) error {
	defer close(s.Done)
	log := ctrl.Log.WithName("state-sweep")
	if s.stateDir == "" {
		return nil
	}
	removed, err := sweepRunSecrets(s.stateDir)
	if err != nil {
		log.Error(err, "Removing the secret files of unfinished runs")
	}
	if removed > 0 {
		log.Info("Removed the secret files of runs an earlier operator process did not finish", "runs", removed)
	}
	orphans, err := s.sweepOrphans(ctx)
	if err != nil {
		log.Error(err, "Removing the state of deleted objects")
	}
	if orphans > 0 {
		log.Info("Removed the run directories, fact caches and fetched snapshots of objects that no longer exist", "directories", orphans)
	}
	return nil
}

// wait blocks until the sweep has run or ctx ends. A nil sweep (a
// reconciler set up on its own, as in narrow tests) does not wait.
func (s *Sweep) wait(ctx context.Context) {
	if s == nil {
		return
	}
	select {
	case <-s.Done:
	case <-ctx.Done():
	}
}

// sweepRunSecrets removes from every run directory,
// <state>/runs/<uid>/<run>, what a run removes when it ends
// (runner.EndOfRunDirs). It returns how many secrets directories it removed.
func sweepRunSecrets(stateDir string) (int, error) {
	secrets := 0
	var errs []error
	for _, sub := range runner.EndOfRunDirs {
		dirs, err := filepath.Glob(filepath.Join(stateDir, runsDirName, "*", "*", sub))
		if err != nil {
			return 0, err
		}
		for _, d := range dirs {
			errs = append(errs, os.RemoveAll(d))
		}
		if sub == runner.SecretsDir {
			secrets = len(dirs)
		}
	}
	return secrets, errors.Join(errs...)
}

// sweepOrphans removes the per-object directories of the state directory
// whose object this operator no longer has: runs and facts by
// KarmadaDeployment UID, restores by EtcdRestore UID.
func (s *Sweep) sweepOrphans(ctx context.Context) (int, error) {
	deployments := &kaov1.KarmadaDeploymentList{}
	if err := s.reader.List(ctx, deployments); err != nil {
		return 0, fmt.Errorf("listing KarmadaDeployments: %w", err)
	}
	restores := &kaov1.EtcdRestoreList{}
	if err := s.reader.List(ctx, restores); err != nil {
		return 0, fmt.Errorf("listing EtcdRestores: %w", err)
	}
	live := map[types.UID]bool{}
	for _, kd := range deployments.Items {
		live[kd.UID] = true
	}
	liveRestores := map[types.UID]bool{}
	for _, er := range restores.Items {
		liveRestores[er.UID] = true
	}
	removed := 0
	var errs []error
	for dir, keep := range map[string]map[types.UID]bool{runsDirName: live, factsDirName: live, RestoresDir: liveRestores} {
		entries, err := os.ReadDir(filepath.Join(s.stateDir, dir))
		if err != nil {
			if !os.IsNotExist(err) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range entries {
			if !e.IsDir() || keep[types.UID(e.Name())] {
				continue
			}
			errs = append(errs, os.RemoveAll(filepath.Join(s.stateDir, dir, e.Name())))
			removed++
		}
	}
	return removed, errors.Join(errs...)
}
