package pipeline

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

	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	bundle "github.com/kao-io/kao/internal/artifacts"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/etcdsnapshot"
	"github.com/kao-io/kao/internal/inventory"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/podforward"
	"github.com/kao-io/kao/internal/probe"
)

const (
	// SnapshotTimeout bounds one attempt: streaming the snapshot, etcdutl's
	// check and the copy to a backup host. An 8 GiB database (etcd's
	// recommended maximum) moves in minutes inside a data centre.
	SnapshotTimeout = 60 * time.Minute

	// BackupsDir is where Local snapshots and temporary files live, under the
	// operator's state directory.
	BackupsDir = "backups"
)

// SnapshotTimeFormat is the UTC time in snapshot file names: sortable, and
// free of the colons scp would read as a host separator.
const SnapshotTimeFormat = "20060102T150405Z"

// EtcdSource is the etcd cluster a backup snapshots and how to reach it.
// Close it when done.
type EtcdSource struct {
	// members maps member names (host names, or host:port of an external
	// endpoint) to client URLs.
	members map[string]string
	// tls authenticates kao to the members.
	tls *tls.Config
	// dial reaches the members through a remote host cluster's API server;
	// nil reaches them over the network.
	dial probe.Dialer
	// close ends what dial opened.
	close func() error
	// Version is the etcd version whose etcdutl checks the snapshot ("" for
	// the bundle's default).
	Version string
	// client is what another process needs to reach the members the same
	// way, when they are reached over the network.
	client *EtcdClient
}

// EtcdClient is how a deployment's etcd is reached over the network: the
// members' client URLs and kao's client certificate. A backup's snapshot
// Job gets it in its request, and takes the snapshot from its own pod.
type EtcdClient struct {
	// Members maps member names to client URLs.
	Members map[string]string `json:"members"`
	// CA is the PEM of the CA of the members' serving certificates.
	CA []byte `json:"ca"`
	// Cert and Key are kao's client certificate and its key, PEM.
	Cert []byte `json:"cert"`
	Key  []byte `json:"key"`
	// Version is the etcd version whose etcdutl checks a snapshot.
	Version string `json:"version,omitempty"`
}

// Source is the EtcdSource that reaches the members with the certificate.
func (c *EtcdClient) Source() (*EtcdSource, error) {
	cfg, err := ClientTLS(pki.Bundle{"ca.crt": c.CA, "client.crt": c.Cert, "client.key": c.Key}, "ca.crt", "client")
	if err != nil {
		return nil, err
	}
	return &EtcdSource{members: c.Members, tls: cfg, Version: c.Version, client: c}, nil
}

// Client is how a process elsewhere reaches the same members, or nil when
// this process reaches them through a port-forward of its own.
func (s *EtcdSource) Client() *EtcdClient {
	if s == nil || s.dial != nil {
		return nil
	}
	return s.client
}

// Close closes the port-forwards the source opened, if any.
func (s *EtcdSource) Close() {
	if s != nil && s.close != nil {
		_ = s.close()
	}
}

// EtcdSourceOf finds the etcd members of a deployment and the client
// certificate to reach them: kao's etcd-healthcheck-client for managed etcd,
// the user's client certificate for spec.etcd.external. The members of a
// Containerized etcd on a remote host cluster resolve only inside it: kao
// reaches them with a port-forward through that cluster's API server, with
// the credentials of spec.hostCluster.
func (g *Gatherer) EtcdSourceOf(ctx context.Context, kd *kaov1.KarmadaDeployment) (*EtcdSource, error) {
	if ext := kd.Spec.Etcd.External; ext != nil {
		e, err := g.ReadExternalEtcd(ctx, kd)
		if err != nil {
			return nil, err
		}
		cfg, err := e.TLSConfig()
		if err != nil {
			return nil, reason.Missing("the client certificate in Secret %s/%s is unusable", kd.Namespace, ext.ClientCertSecretName)
		}
		return &EtcdSource{members: e.Endpoint, tls: cfg,
			client: &EtcdClient{Members: e.Endpoint, CA: e.ca, Cert: e.certPEM, Key: e.keyPEM}}, nil
	}
	b, err := g.ReadPKI(ctx, kd)
	if err != nil {
		return nil, err
	}
	cfg, err := ClientTLS(b, "etcd-ca.crt", "etcd-healthcheck-client")
	if err != nil {
		return nil, reason.Missing("the PKI Secret %s/%s cannot authenticate kao to etcd: %v", kd.Namespace, PKISecretName(kd), err)
	}
	members := managedEtcdMembers(kd)
	src := &EtcdSource{members: members, tls: cfg, client: &EtcdClient{Members: members,
		CA: b["etcd-ca.crt"], Cert: b["etcd-healthcheck-client.crt"], Key: b["etcd-healthcheck-client.key"]}}
	if m := kd.Spec.Etcd.Managed; m != nil {
		src.Version, src.client.Version = m.Version, m.Version
	}
	if kd.Spec.Mode == kaov1.ContainerizedMode && (kd.Spec.HostCluster == nil || !kd.Spec.HostCluster.InCluster) {
		hc, err := g.HostCluster(ctx, kd)
		if err != nil {
			return nil, err
		}
		pods, err := podforward.New(hc.REST, hc.Namespace)
		if err != nil {
			return nil, reason.Missing("%s", "the host cluster's kubeconfig is unusable: "+sanitizeKubeconfigError(err))
		}
		src.dial, src.close = etcdPodDialer(kd, pods), pods.Close
	}
	return src, nil
}

// etcdPodDialer reaches the members of a Containerized etcd through pods:
// it forwards the client URL of a StatefulSet pod of the deployment's etcd
// (any ordinal, so that members beyond spec.etcd.managed.replicas, which the
// cluster's member list names while it scales, are reached too) and refuses
// every other address, whatever a member list says.
func etcdPodDialer(kd *kaov1.KarmadaDeployment, pods *podforward.Dialer) probe.Dialer {
	suffix := "." + ServiceNames(kd, HostEtcd)[1]
	port := strconv.Itoa(EtcdClientPort)
	return func(ctx context.Context, addr string) (net.Conn, error) {
		host, p, err := net.SplitHostPort(addr)
		pod, ok := strings.CutSuffix(host, suffix)
		ordinal, isPod := strings.CutPrefix(pod, HostEtcd+"-")
		if _, nerr := strconv.ParseUint(ordinal, 10, 16); err != nil || !ok || !isPod || nerr != nil || p != port {
			return nil, fmt.Errorf("kao forwards only to the client port of the deployment's etcd pods (%s-<n>%s:%s), not to %s", HostEtcd, suffix, port, addr)
		}
		return pods.Dial(ctx, pod, EtcdClientPort)
	}
}

// managedEtcdMembers maps the members of a managed etcd to their client
// URLs: the etcd hosts (Binary), or the StatefulSet's pods by their DNS
// names in the host cluster, which kao's etcd certificates name
// (Containerized; only resolvable from inside the host cluster, and reached
// from outside it through etcdPodDialer).
func managedEtcdMembers(kd *kaov1.KarmadaDeployment) map[string]string {
	out := map[string]string{}
	if kd.Spec.Mode == kaov1.ContainerizedMode {
		for _, pod := range inventory.EtcdPodNames(kd) {
			out[pod] = EtcdMemberURL(kd, pod)
		}
		return out
	}
	for _, h := range HostsWithRole(kd, kaov1.EtcdRole) {
		out[h.Name] = "https://" + net.JoinHostPort(h.Address, strconv.Itoa(EtcdClientPort))
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

// EtcdutlFor finds the etcdutl that checks snapshots: the operator's own,
// in its --artifacts-dir bundle (etcd/<version>/bin/etcdutl), for the
// deployment's etcd version when the bundle has it and for the bundle's
// default etcd otherwise (etcdutl reads the snapshots of every etcd v3).
//
// Never from spec.artifacts: a tenant chooses that bundle, and the operator
// runs only programs an administrator installed (its image, its
// --artifacts-dir). A tenant's bundle provides files for the tenant's hosts.
func (g *Gatherer) EtcdutlFor(version string) (string, error) {
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

// SnapshotLimits bounds what one snapshot may take of the state volume.
func (g *Gatherer) SnapshotLimits() etcdsnapshot.Limits {
	return etcdsnapshot.Limits{MaxBytes: g.MaxSnapshotBytes}
}

// SSHTarget reads the SSH destination's Secrets.
func (g *Gatherer) SSHTarget(ctx context.Context, eb *kaov1.EtcdBackup, tmp string) (*etcdsnapshot.SSHTarget, error) {
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

// StreamSnapshot streams a snapshot into the file partial from the first
// member that gives a complete one (snapshotCandidates' order) and checks it
// with etcdutl.
func StreamSnapshot(ctx context.Context, prober probe.EtcdProber, src *EtcdSource, etcdutl, partial string, lim etcdsnapshot.Limits) (*etcdsnapshot.Saved, probe.EtcdMember, *etcdsnapshot.Status, error) {
	log := ctrl.LoggerFrom(ctx)
	candidates, err := snapshotCandidates(prober.Etcd(ctx, src.members, src.tls, src.dial))
	if err != nil {
		return nil, probe.EtcdMember{}, nil, err
	}
	var saved *etcdsnapshot.Saved
	var member probe.EtcdMember
	failures := []string{}
	for _, m := range candidates {
		start := time.Now()
		saved, err = etcdsnapshot.Save(ctx, m.Endpoint, src.tls, src.dial, partial, lim)
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

// DescribeSSHError says which Secret or host an SSH failure points at.
func DescribeSSHError(eb *kaov1.EtcdBackup, err error) error {
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

// PrivateDir makes dir, under root in the state directory, readable by the
// operator alone: every directory from root down to dir gets mode 0700, so a
// state directory made before kao kept backups private gets private backups.
func PrivateDir(root, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("making %s: %w", dir, err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o700); err != nil { //nolint:gosec // a directory: 0700 is the owner alone, with the x bit it needs
			return fmt.Errorf("making %s private: %w", d, err)
		}
		if d == root || d == filepath.Dir(d) {
			return nil
		}
	}
}

// SyncDir makes a rename in dir durable.
func SyncDir(dir string) error {
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
