package etcdrestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/etcdsnapshot"
)

// verifiedSnapshot finds the snapshot spec.source names and checks it on the
// operator's side: its SHA-256 must be the recorded one and etcdutl must
// open it. A snapshot on a backup host is fetched first, into the restore's
// own directory. It returns the snapshot as status shows it and the local
// file the run copies to the hosts.
//
// A Retry *reason.Error (a missing backup, Secret or bundle) is worth
// waiting for; a Refuse ends the restore.
func (r *Reconciler) verifiedSnapshot(ctx context.Context, er *kaov1.EtcdRestore, kd *kaov1.KarmadaDeployment) (*kaov1.Snapshot, string, error) {
	ctx, cancel := context.WithTimeout(ctx, restoreVerifyTimeout)
	defer cancel()
	if r.StateDir == "" {
		return nil, "", reason.Missing("the operator runs without --state-dir: there is no snapshot to restore")
	}
	src := er.Spec.Source
	snap := &kaov1.Snapshot{Name: filepath.Base(src.Path), Location: src.Path, SHA256: src.SHA256}
	var eb *kaov1.EtcdBackup
	if src.BackupName != "" {
		eb = &kaov1.EtcdBackup{}
		key := types.NamespacedName{Namespace: er.Namespace, Name: src.BackupName}
		if err := r.Client.Get(ctx, key, eb); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, "", reason.Missing("EtcdBackup %s named in spec.source.backupName does not exist", key)
			}
			return nil, "", fmt.Errorf("reading EtcdBackup %s: %w", key, err)
		}
		var err error
		if snap, err = pickSnapshot(eb, src.SnapshotName); err != nil {
			return nil, "", err
		}
	}

	local, fetched, err := r.localSnapshot(ctx, er, eb, snap)
	if err != nil {
		return nil, "", err
	}
	sum, size, err := etcdsnapshot.FileSHA256(local)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, "", reason.Refused(kaov1.RestoreFailedReason, "the snapshot file %s does not exist", snap.Location)
		}
		return nil, "", reason.Refused(kaov1.RestoreFailedReason, "the snapshot file %s cannot be read", snap.Location)
	}
	if sum != snap.SHA256 {
		if fetched {
			_ = os.Remove(local) // a damaged copy is fetched anew next time
		}
		return nil, "", reason.Refused(kaov1.ChecksumMismatchReason,
			"the snapshot %s does not match the expected sha256 %s (%s): kao refuses to restore it and stopped nothing",
			snap.Location, snap.SHA256, checksumSource(er))
	}
	var version string
	if m := kd.Spec.Etcd.Managed; m != nil {
		version = m.Version
	}
	etcdutl, err := r.inputs().EtcdutlFor(version)
	if err != nil {
		return nil, "", err
	}
	st, err := etcdsnapshot.ReadStatus(ctx, etcdutl, local)
	if err != nil {
		if ctx.Err() != nil {
			return nil, "", err
		}
		return nil, "", reason.Refused(kaov1.RestoreFailedReason, "the snapshot %s matches its sha256, but %v: kao refuses to restore it and stopped nothing", snap.Location, err)
	}
	snap.Size = *resource.NewQuantity(size, resource.BinarySI)
	snap.Revision = st.Revision
	if snap.Time.IsZero() {
		if fi, err := os.Stat(local); err == nil {
			snap.Time = metav1.NewTime(fi.ModTime())
		}
	}
	return snap, local, nil
}

// checksumSource says where the expected sha256 came from, for messages.
func checksumSource(er *kaov1.EtcdRestore) string {
	if er.Spec.Source.BackupName != "" {
		return "recorded in the status of EtcdBackup " + er.Spec.Source.BackupName
	}
	return "spec.source.sha256"
}

// pickSnapshot finds a snapshot in a backup's status: the named one, or the
// newest. A backup without snapshots yet is worth waiting for; a named
// snapshot that is not listed is gone (retention) or never was.
func pickSnapshot(eb *kaov1.EtcdBackup, name string) (*kaov1.Snapshot, error) {
	all := append([]kaov1.Snapshot(nil), eb.Status.Snapshots...)
	if last := eb.Status.LastSnapshot; last != nil {
		all = append(all, *last)
	}
	if name == "" {
		var newest *kaov1.Snapshot
		for i := range all {
			if newest == nil || all[i].Time.After(newest.Time.Time) {
				newest = &all[i]
			}
		}
		if newest == nil {
			return nil, reason.Missing("EtcdBackup %s has no snapshot yet", eb.Name)
		}
		return newest.DeepCopy(), nil
	}
	for i := range all {
		if all[i].Name == name {
			return all[i].DeepCopy(), nil
		}
	}
	return nil, reason.Refused(kaov1.RestoreFailedReason,
		"EtcdBackup %s lists no snapshot named %s (spec.source.snapshotName) in status.snapshots", eb.Name, name)
}

// localSnapshot returns the local file of a snapshot: a file on the state
// volume is used where it is; one on a backup host is fetched into the
// restore's directory, unless an earlier attempt fetched it already;
// fetched says so.
func (r *Reconciler) localSnapshot(ctx context.Context, er *kaov1.EtcdRestore, eb *kaov1.EtcdBackup, snap *kaov1.Snapshot) (local string, fetched bool, err error) {
	if strings.HasPrefix(snap.Location, "/") {
		local, err = r.onStateVolume(er, snap.Location)
		return local, false, err
	}
	if eb == nil || eb.Spec.Destination.Type != kaov1.SSHDestination {
		return "", false, reason.Refused(kaov1.RestoreFailedReason,
			"the snapshot is stored at %s, but EtcdBackup %s no longer copies to a backup host: kao cannot fetch it", snap.Location, er.Spec.Source.BackupName)
	}
	dir, err := r.restoreDir(er)
	if err != nil {
		return "", false, err
	}
	target, err := r.inputs().SSHTarget(ctx, eb, dir)
	if err != nil {
		return "", false, err
	}
	if target.Location(snap.Name) != snap.Location {
		return "", false, reason.Refused(kaov1.RestoreFailedReason,
			"the snapshot is stored at %s, a former destination of EtcdBackup %s: kao cannot fetch it", snap.Location, eb.Name)
	}
	local = filepath.Join(dir, snap.Name)
	if sum, _, err := etcdsnapshot.FileSHA256(local); err == nil && sum == snap.SHA256 {
		return local, true, nil
	}
	_ = os.Remove(local)
	if err := target.Download(ctx, snap.Name, local); err != nil {
		err = pipeline.DescribeSSHError(eb, err)
		if _, ok := reason.From(err); ok {
			return "", false, err
		}
		return "", false, reason.Missing("fetching %s: %v", snap.Location, err) // a host down is worth waiting for
	}
	return local, true, nil
}

// onStateVolume resolves the path of a snapshot on the operator's state
// volume. Only the snapshots of the restore's own namespace can be
// restored: <state>/backups/<namespace>/, where that namespace's
// EtcdBackups and pre-upgrade snapshots are kept. Any other path, whether
// or not a file is there, gets one and the same refusal, so a restore tells
// nothing about other namespaces' files.
func (r *Reconciler) onStateVolume(er *kaov1.EtcdRestore, p string) (string, error) {
	refuse := reason.Refused(kaov1.InvalidSpecReason,
		"the snapshot %s is not one of namespace %s's backups: kao restores only snapshots under %s",
		p, er.Namespace, filepath.Join(r.StateDir, pipeline.BackupsDir, er.Namespace)+string(filepath.Separator))
	clean := filepath.Clean(p)
	under := func(path, state string) bool {
		return strings.HasPrefix(path, filepath.Join(state, pipeline.BackupsDir, er.Namespace)+string(filepath.Separator))
	}
	realState, err := filepath.EvalSymlinks(r.StateDir)
	if err != nil {
		return "", fmt.Errorf("resolving the state directory: %w", err)
	}
	if !under(clean, filepath.Clean(r.StateDir)) && !under(clean, realState) {
		return "", refuse
	}
	real, err := filepath.EvalSymlinks(clean)
	switch {
	case os.IsNotExist(err):
		return "", reason.Refused(kaov1.RestoreFailedReason, "the snapshot file %s does not exist", p)
	case err != nil:
		return "", reason.Refused(kaov1.RestoreFailedReason, "the snapshot file %s cannot be read", p)
	case !under(real, realState):
		return "", refuse
	}
	if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
		return "", reason.Refused(kaov1.RestoreFailedReason, "the snapshot %s is not a regular file", p)
	}
	return real, nil
}

// restoreDir is the restore's private directory on the state volume, for
// snapshots fetched from a backup host and ssh's key files:
// <state>/restores/<UID>.
func (r *Reconciler) restoreDir(er *kaov1.EtcdRestore) (string, error) {
	dir := filepath.Join(r.StateDir, pipeline.RestoresDir, string(er.UID))
	if err := pipeline.PrivateDir(filepath.Join(r.StateDir, pipeline.RestoresDir), dir); err != nil {
		return "", err
	}
	return dir, nil
}

// removeRestoreDir removes what the restore fetched; the snapshot stays
// where its backup stored it.
func (r *Reconciler) removeRestoreDir(er *kaov1.EtcdRestore) error {
	if r.StateDir == "" || er.UID == "" {
		return nil
	}
	return os.RemoveAll(filepath.Join(r.StateDir, pipeline.RestoresDir, string(er.UID)))
}
