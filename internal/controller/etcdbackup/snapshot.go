package etcdbackup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/etcdsnapshot"
	"github.com/kao-io/kao/internal/probe"
)

// snapshotResult is a stored snapshot and what etcdutl read from it.
type snapshotResult struct {
	snapshot kaov1.Snapshot
	keys     int
}

// localBackupDir is where a backup's Local snapshots and every temporary
// snapshot file live: <state>/backups/<namespace>/<deployment>.
func (r *Reconciler) localBackupDir(eb *kaov1.EtcdBackup) string {
	return filepath.Join(r.StateDir, pipeline.BackupsDir, eb.Namespace, eb.Spec.DeploymentName)
}

// snapshotFileName is <backup>-<UTC time>.db.
func snapshotFileName(eb *kaov1.EtcdBackup, at time.Time) string {
	return pipeline.TruncateString(eb.Name, 200) + "-" + at.UTC().Format(pipeline.SnapshotTimeFormat) + ".db"
}

// takeSnapshot takes one snapshot of the deployment's etcd, checks it with
// etcdutl and stores it at the destination. Every failure names its cause
// and never quotes secret material.
func (r *Reconciler) takeSnapshot(ctx context.Context, eb *kaov1.EtcdBackup, src *pipeline.EtcdSource, now time.Time) (*snapshotResult, error) {
	ctx, cancel := context.WithTimeout(ctx, pipeline.SnapshotTimeout)
	defer cancel()
	if r.StateDir == "" {
		return nil, reason.Missing("the operator runs without --state-dir: there is no place to write snapshots")
	}
	etcdutl, err := r.inputs().EtcdutlFor(src.Version)
	if err != nil {
		return nil, err
	}
	dir := r.localBackupDir(eb)
	if err := pipeline.PrivateDir(filepath.Join(r.StateDir, pipeline.BackupsDir), dir); err != nil {
		return nil, err
	}
	tmp, cleanup, err := r.backupTempDir(eb)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var target *etcdsnapshot.SSHTarget
	if eb.Spec.Destination.Type == kaov1.SSHDestination {
		if target, err = r.inputs().SSHTarget(ctx, eb, tmp); err != nil {
			return nil, err
		}
	}
	name := snapshotFileName(eb, now)
	partial := filepath.Join(tmp, name+".partial")
	res, err := streamAndCheck(ctx, r.etcdProber(), src, etcdutl, partial, name, r.inputs().SnapshotLimits(), now)
	if err != nil {
		return nil, err
	}
	snap := &res.snapshot
	switch eb.Spec.Destination.Type {
	case kaov1.SSHDestination:
		if err := target.Upload(ctx, partial, name, snap.SHA256); err != nil {
			return nil, pipeline.DescribeSSHError(eb, err)
		}
		snap.Location = target.Location(name)
	default:
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
		snap.Location = final
	}
	return res, nil
}

// streamAndCheck streams a snapshot from one of src's members into the file
// partial and checks it with etcdutl: the snapshot named name, taken at now,
// not stored anywhere yet. The operator does it for its own backups, and a
// snapshot Job's pod for the backups it takes.
func streamAndCheck(ctx context.Context, prober probe.EtcdProber, src *pipeline.EtcdSource, etcdutl, partial, name string,
	lim etcdsnapshot.Limits, now time.Time) (*snapshotResult, error) {
	saved, member, status, err := pipeline.StreamSnapshot(ctx, prober, src, etcdutl, partial, lim)
	if err != nil {
		return nil, err
	}
	return &snapshotResult{keys: status.TotalKey, snapshot: kaov1.Snapshot{
		Name: name, Size: *resource.NewQuantity(saved.Size, resource.BinarySI), SHA256: saved.SHA256,
		Revision: status.Revision, Keys: int64(status.TotalKey), Member: pipeline.TruncateString(member.Name, 253), Time: metav1.NewTime(now),
	}}, nil
}

// backupTempDir makes the private directory of one attempt of a backup:
// the snapshot before it is checked and stored, and the SSH key and
// known_hosts while ssh runs. What an interrupted attempt (an operator
// restart) left there is removed first; reconciles of one backup never
// overlap, so nothing in it is in use. cleanup removes it.
func (r *Reconciler) backupTempDir(eb *kaov1.EtcdBackup) (dir string, cleanup func(), err error) {
	dir = filepath.Join(r.localBackupDir(eb), ".tmp-"+pipeline.TruncateString(eb.Name, 200))
	if err := os.RemoveAll(dir); err != nil {
		return "", nil, fmt.Errorf("removing leftovers of an earlier attempt: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("making a temporary directory for the snapshot: %w", err)
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// pruneSnapshots deletes the files of snapshots retention dropped. A file
// kao can no longer reach (stored at a former destination) is left alone and
// reported; one it failed to delete stays in the list, to be deleted after
// the next snapshot.
func (r *Reconciler) pruneSnapshots(ctx context.Context, eb *kaov1.EtcdBackup, dropped []kaov1.Snapshot) (deleted int, failed []kaov1.Snapshot, problems []string) {
	tmp, cleanup, err := r.backupTempDir(eb)
	if err != nil {
		return 0, dropped, []string{err.Error()}
	}
	defer cleanup()
	var target *etcdsnapshot.SSHTarget
	remote := []kaov1.Snapshot{}
	localRoot := filepath.Join(r.StateDir, pipeline.BackupsDir, eb.Namespace) + string(filepath.Separator)
	for _, s := range dropped {
		switch {
		case !etcdsnapshot.FileName.MatchString(s.Name):
			problems = append(problems, fmt.Sprintf("%s is not a snapshot name kao writes: left alone", s.Name))
		case strings.HasPrefix(s.Location, "/"):
			clean := filepath.Clean(s.Location)
			if !strings.HasPrefix(clean, localRoot) || filepath.Base(clean) != s.Name {
				problems = append(problems, fmt.Sprintf("%s at %s is outside this backup's directory: left alone", s.Name, s.Location))
				continue
			}
			if err := os.Remove(clean); err != nil && !os.IsNotExist(err) {
				failed = append(failed, s)
				problems = append(problems, fmt.Sprintf("deleting %s: %v", clean, err))
				continue
			}
			deleted++
		default:
			if target == nil && eb.Spec.Destination.Type == kaov1.SSHDestination {
				t, err := r.inputs().SSHTarget(ctx, eb, tmp)
				if err != nil {
					failed = append(failed, s)
					problems = append(problems, fmt.Sprintf("deleting %s: %v", s.Location, err))
					continue
				}
				target = t
			}
			if target == nil || target.Location(s.Name) != s.Location {
				problems = append(problems, fmt.Sprintf("%s was stored at a former destination: delete it by hand", s.Location))
				continue
			}
			remote = append(remote, s)
		}
	}
	if len(remote) > 0 {
		names := make([]string, len(remote))
		for i, s := range remote {
			names[i] = s.Name
		}
		if err := target.Remove(ctx, names...); err != nil {
			failed = append(failed, remote...)
			problems = append(problems, fmt.Sprintf("deleting %s: %v", strings.Join(names, ", "), pipeline.DescribeSSHError(eb, err)))
		} else {
			deleted += len(remote)
		}
	}
	return deleted, failed, problems
}
