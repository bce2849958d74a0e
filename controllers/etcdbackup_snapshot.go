package controllers

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	bundle "github.com/kao-io/kao/internal/artifacts"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/etcdsnapshot"
	"github.com/kao-io/kao/internal/probe"
)

// snapshotTimeFormat is the UTC time in snapshot file names: sortable, and
// free of the colons scp would read as a host separator.
const snapshotTimeFormat = "20060102T150405Z"

// etcdSource is the etcd cluster a backup snapshots and how to reach it.
type etcdSource struct {
	// members maps member names (host names, or host:port of an external
	// endpoint) to client URLs.
	members map[string]string
	// tls authenticates kao to the members.
	tls *tls.Config
	// version is the etcd version whose etcdutl checks the snapshot ("" for
	// the bundle's default).
	version string
}

// snapshotResult is a stored snapshot and what etcdutl read from it.
type snapshotResult struct {
	snapshot kaov1.Snapshot
	keys     int
}

// etcdSourceOf finds the etcd members of a deployment and the client
// certificate to reach them: kao's etcd-healthcheck-client for managed etcd,
// the user's client certificate for spec.etcd.external.
func (g *gatherer) etcdSourceOf(ctx context.Context, kd *kaov1.KarmadaDeployment) (*etcdSource, error) {
	if ext := kd.Spec.Etcd.External; ext != nil {
		e, err := g.readExternalEtcd(ctx, kd)
		if err != nil {
			return nil, err
		}
		cfg, err := e.tlsConfig()
		if err != nil {
			return nil, reason.Missing("the client certificate in Secret %s/%s is unusable", kd.Namespace, ext.ClientCertSecretName)
		}
		return &etcdSource{members: e.endpoint, tls: cfg}, nil
	}
	b, err := g.readPKI(ctx, kd)
	if err != nil {
		return nil, err
	}
	cfg, err := clientTLS(b, "etcd-ca.crt", "etcd-healthcheck-client")
	if err != nil {
		return nil, reason.Missing("the PKI Secret %s/%s cannot authenticate kao to etcd: %v", kd.Namespace, pkiSecretName(kd), err)
	}
	src := &etcdSource{members: managedEtcdMembers(kd), tls: cfg}
	if m := kd.Spec.Etcd.Managed; m != nil {
		src.version = m.Version
	}
	return src, nil
}

// managedEtcdMembers maps the members of a managed etcd to their client
// URLs: the etcd hosts (Binary), or the StatefulSet's pods by their DNS
// names in the host cluster, which kao's etcd certificates name
// (Containerized; only resolvable from inside the host cluster).
func managedEtcdMembers(kd *kaov1.KarmadaDeployment) map[string]string {
	out := map[string]string{}
	if kd.Spec.Mode == kaov1.ContainerizedMode {
		for _, pod := range etcdMemberNames(kd) {
			out[pod] = etcdMemberURL(kd, pod)
		}
		return out
	}
	for _, h := range hostsWithRole(kd, kaov1.EtcdRole) {
		out[h.Name] = "https://" + net.JoinHostPort(h.Address, strconv.Itoa(etcdClientPort))
	}
	return out
}

// snapshotCandidates orders the members a snapshot may come from: healthy
// followers first, by name (streaming the whole database costs the member
// disk and network, and every write goes through the leader), then the
// leader. Without quorum there is none: a member cut off from the majority
// may miss committed writes.
func snapshotCandidates(h probe.EtcdHealth) ([]probe.EtcdMember, error) {
	if len(h.Members) == 0 {
		return nil, errors.New("the deployment lists no etcd members")
	}
	switch {
	case h.Healthy == 0:
		return nil, fmt.Errorf("no etcd member answers (%s): %s", h.Summary(), h.Problems())
	case !h.HasQuorum():
		return nil, fmt.Errorf("etcd has no quorum (%s members answer): %s", h.Summary(), h.Problems())
	case h.Leader == "":
		// A majority answers but none names a live leader: the leader was
		// lost and the others are electing a new one, which takes seconds.
		return nil, fmt.Errorf("etcd has no leader right now (%s members answer; an election is under way "+
			"if the leader was lost): %s; the next backup will try again", h.Summary(), h.Problems())
	}
	out := []probe.EtcdMember{}
	var leader *probe.EtcdMember
	for i, m := range h.Members {
		switch {
		case !m.Healthy:
		case m.Leader:
			leader = &h.Members[i]
		default:
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if leader != nil {
		out = append(out, *leader)
	}
	return out, nil
}

// etcdutlFor finds the etcdutl that checks snapshots: the operator's own,
// in its --artifacts-dir bundle (etcd/<version>/bin/etcdutl), for the
// deployment's etcd version when the bundle has it and for the bundle's
// default etcd otherwise (etcdutl reads the snapshots of every etcd v3).
//
// Never from spec.artifacts: a tenant chooses that bundle, and the operator
// runs only programs an administrator installed (its image, its
// --artifacts-dir). A tenant's bundle provides files for the tenant's hosts.
func (g *gatherer) etcdutlFor(version string) (string, error) {
	if g.ArtifactsDir == "" {
		return "", reason.Missing("the operator has no --artifacts-dir bundle to take etcdutl from, which checks every snapshot: its administrator must set one")
	}
	versions := []string{}
	if bundleVersion.MatchString(version) { // a spec's version; the API checked it, an older CRD may not have
		versions = append(versions, version)
	}
	data, err := os.ReadFile(filepath.Join(g.ArtifactsDir, bundle.ManifestFile))
	m := bundle.Manifest{}
	if err == nil && json.Unmarshal(data, &m) == nil && bundleVersion.MatchString(m.Etcd) && m.Etcd != version {
		versions = append(versions, m.Etcd)
	}
	for _, v := range versions {
		bin := filepath.Join(g.ArtifactsDir, "etcd", v, "bin", "etcdutl")
		if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return bin, nil
		}
	}
	looked := "its manifest.json names no etcd version"
	if len(versions) > 0 {
		looked = "no etcd/" + strings.Join(versions, "/bin/etcdutl nor etcd/") + "/bin/etcdutl"
	}
	return "", reason.Missing("etcdutl, which checks every snapshot, is not in the operator's --artifacts-dir %s (%s): its administrator must give it a bundle with etcd (`make artifacts`)",
		g.ArtifactsDir, looked)
}

// snapshotLimits bounds what one snapshot may take of the state volume.
func (g *gatherer) snapshotLimits() etcdsnapshot.Limits {
	return etcdsnapshot.Limits{MaxBytes: g.MaxSnapshotBytes}
}

// localBackupDir is where a backup's Local snapshots and every temporary
// snapshot file live: <state>/backups/<namespace>/<deployment>.
func (r *EtcdBackupReconciler) localBackupDir(eb *kaov1.EtcdBackup) string {
	return filepath.Join(r.StateDir, backupsDir, eb.Namespace, eb.Spec.DeploymentName)
}

// snapshotFileName is <backup>-<UTC time>.db.
func snapshotFileName(eb *kaov1.EtcdBackup, at time.Time) string {
	return truncateString(eb.Name, 200) + "-" + at.UTC().Format(snapshotTimeFormat) + ".db"
}

// sshTarget reads the SSH destination's Secrets.
func (g *gatherer) sshTarget(ctx context.Context, eb *kaov1.EtcdBackup, tmp string) (*etcdsnapshot.SSHTarget, error) {
	d := eb.Spec.Destination.SSH
	if d == nil {
		return nil, reason.Missing("spec.destination.ssh is required when spec.destination.type is SSH")
	}
	key, err := g.secretValue(ctx, eb.Namespace, d.PrivateKeySecretRef, "spec.destination.ssh.privateKeySecretRef")
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(key, []byte("PRIVATE KEY-----")) {
		return nil, reason.Missing("Secret %s/%s key %q named in spec.destination.ssh.privateKeySecretRef holds no PEM or OpenSSH private key",
			eb.Namespace, d.PrivateKeySecretRef.Name, d.PrivateKeySecretRef.Key)
	}
	known, err := g.secretValue(ctx, eb.Namespace, d.KnownHostsSecretRef, "spec.destination.ssh.knownHostsSecretRef")
	if err != nil {
		return nil, err
	}
	t := &etcdsnapshot.SSHTarget{
		Address: d.Address, Port: int(d.Port), User: d.User, Directory: d.Directory,
		PrivateKey: key, KnownHosts: known, TempDir: tmp,
	}
	if t.Port == 0 {
		t.Port = 22
	}
	if t.User == "" {
		t.User = "root"
	}
	if err := t.Validate(); err != nil {
		return nil, reason.Missing("%s", "spec.destination.ssh: "+err.Error())
	}
	return t, nil
}

// takeSnapshot takes one snapshot of the deployment's etcd, checks it with
// etcdutl and stores it at the destination. Every failure names its cause
// and never quotes secret material.
func (r *EtcdBackupReconciler) takeSnapshot(ctx context.Context, eb *kaov1.EtcdBackup, src *etcdSource, now time.Time) (*snapshotResult, error) {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	if r.StateDir == "" {
		return nil, reason.Missing("the operator runs without --state-dir: there is no place to write snapshots")
	}
	etcdutl, err := r.inputs().etcdutlFor(src.version)
	if err != nil {
		return nil, err
	}
	dir := r.localBackupDir(eb)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making the backup directory: %w", err)
	}
	if err := chmodTree(filepath.Join(r.StateDir, backupsDir), dir, 0o700); err != nil {
		return nil, err
	}
	tmp, cleanup, err := r.backupTempDir(eb)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var target *etcdsnapshot.SSHTarget
	if eb.Spec.Destination.Type == kaov1.SSHDestination {
		if target, err = r.inputs().sshTarget(ctx, eb, tmp); err != nil {
			return nil, err
		}
	}
	name := snapshotFileName(eb, now)
	partial := filepath.Join(tmp, name+".partial")

	saved, member, status, err := streamSnapshot(ctx, r.etcdProber(), src, etcdutl, partial, r.inputs().snapshotLimits())
	if err != nil {
		return nil, err
	}

	snap := kaov1.Snapshot{
		Name: name, Size: *resource.NewQuantity(saved.Size, resource.BinarySI), SHA256: saved.SHA256,
		Revision: status.Revision, Keys: int64(status.TotalKey), Member: truncateString(member.Name, 253), Time: metav1.NewTime(now),
	}
	switch eb.Spec.Destination.Type {
	case kaov1.SSHDestination:
		if err := target.Upload(ctx, partial, name, saved.SHA256); err != nil {
			return nil, describeSSHError(eb, err)
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
		if err := syncDir(dir); err != nil {
			return nil, err
		}
		snap.Location = final
	}
	return &snapshotResult{snapshot: snap, keys: status.TotalKey}, nil
}

// streamSnapshot streams a snapshot into the file partial from the first
// member that gives a complete one (snapshotCandidates' order) and checks it
// with etcdutl.
func streamSnapshot(ctx context.Context, prober probe.EtcdProber, src *etcdSource, etcdutl, partial string, lim etcdsnapshot.Limits) (*etcdsnapshot.Saved, probe.EtcdMember, *etcdsnapshot.Status, error) {
	log := ctrl.LoggerFrom(ctx)
	candidates, err := snapshotCandidates(prober.Etcd(ctx, src.members, src.tls))
	if err != nil {
		return nil, probe.EtcdMember{}, nil, err
	}
	var saved *etcdsnapshot.Saved
	var member probe.EtcdMember
	failures := []string{}
	for _, m := range candidates {
		start := time.Now()
		saved, err = etcdsnapshot.Save(ctx, m.Endpoint, src.tls, partial, lim)
		if err == nil {
			member = m
			log.V(1).Info("Streamed an etcd snapshot", "member", m.Name, "bytes", saved.Size, "took", time.Since(start))
			break
		}
		failures = append(failures, fmt.Sprintf("member %s: %v", m.Name, err))
		if ctx.Err() != nil {
			break
		}
	}
	if saved == nil {
		return nil, member, nil, fmt.Errorf("no member gave a complete snapshot: %s", strings.Join(failures, "; "))
	}
	status, err := etcdsnapshot.ReadStatus(ctx, etcdutl, partial)
	if err != nil {
		return nil, member, nil, fmt.Errorf("checking the snapshot from member %s: %w", member.Name, err)
	}
	return saved, member, status, nil
}

// describeSSHError says which Secret or host an SSH failure points at.
func describeSSHError(eb *kaov1.EtcdBackup, err error) error {
	d := eb.Spec.Destination.SSH
	switch {
	case errors.Is(err, etcdsnapshot.ErrHostKey):
		return reason.Missing("the backup host's key is not the one pinned in Secret %s/%s key %q (spec.destination.ssh.knownHostsSecretRef), so kao refused to connect: %v",
			eb.Namespace, d.KnownHostsSecretRef.Name, d.KnownHostsSecretRef.Key, err)
	case errors.Is(err, etcdsnapshot.ErrAuth):
		return reason.Missing("the backup host refused the key in Secret %s/%s key %q (spec.destination.ssh.privateKeySecretRef): %v",
			eb.Namespace, d.PrivateKeySecretRef.Name, d.PrivateKeySecretRef.Key, err)
	}
	return err
}

// backupTempDir makes the private directory of one attempt of a backup:
// the snapshot before it is checked and stored, and the SSH key and
// known_hosts while ssh runs. What an interrupted attempt (an operator
// restart) left there is removed first; reconciles of one backup never
// overlap, so nothing in it is in use. cleanup removes it.
func (r *EtcdBackupReconciler) backupTempDir(eb *kaov1.EtcdBackup) (dir string, cleanup func(), err error) {
	dir = filepath.Join(r.localBackupDir(eb), ".tmp-"+truncateString(eb.Name, 200))
	if err := os.RemoveAll(dir); err != nil {
		return "", nil, fmt.Errorf("removing leftovers of an earlier attempt: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("making a temporary directory for the snapshot: %w", err)
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// chmodTree sets mode on every directory from root down to dir, so a state
// directory made before kao kept backups private gets private backups.
func chmodTree(root, dir string, mode os.FileMode) error {
	for d := dir; ; d = filepath.Dir(d) {
		if err := os.Chmod(d, mode); err != nil {
			return fmt.Errorf("making %s private: %w", d, err)
		}
		if d == root || d == filepath.Dir(d) {
			return nil
		}
	}
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// pruneSnapshots deletes the files of snapshots retention dropped. A file
// kao can no longer reach (stored at a former destination) is left alone and
// reported; one it failed to delete stays in the list, to be deleted after
// the next snapshot.
func (r *EtcdBackupReconciler) pruneSnapshots(ctx context.Context, eb *kaov1.EtcdBackup, dropped []kaov1.Snapshot) (deleted int, failed []kaov1.Snapshot, problems []string) {
	tmp, cleanup, err := r.backupTempDir(eb)
	if err != nil {
		return 0, dropped, []string{err.Error()}
	}
	defer cleanup()
	var target *etcdsnapshot.SSHTarget
	remote := []kaov1.Snapshot{}
	localRoot := filepath.Join(r.StateDir, backupsDir, eb.Namespace) + string(filepath.Separator)
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
				t, err := r.inputs().sshTarget(ctx, eb, tmp)
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
			problems = append(problems, fmt.Sprintf("deleting %s: %v", strings.Join(names, ", "), describeSSHError(eb, err)))
		} else {
			deleted += len(remote)
		}
	}
	return deleted, failed, problems
}
