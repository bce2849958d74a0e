package etcdbackup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/test/hosts"
)

// tenantBundle makes a bundle like controllertest.BackupBundle's whose etcdutl is a
// program that writes marker and fails: what a tenant's bundle could hold.
func tenantBundle(t *testing.T, marker string) string {
	t.Helper()
	dir := controllertest.BackupBundle(t, false)
	script := "#!/bin/sh\ntouch " + marker + "\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "etcd", controllertest.TestEtcdVersion, "bin", "etcdutl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// binaryDeployment creates a Binary KarmadaDeployment on the cluster's
// hosts with its PKI Secret, as kao leaves them after an install;
// installed says whether status.observedGeneration shows a finished install.
func binaryDeployment(t *testing.T, ns, name string, c *controllertest.EtcdCluster, bundleDir string, installed bool) *kaov1.KarmadaDeployment {
	t.Helper()
	ctx := context.Background()
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode: kaov1.BinaryMode, Version: "v1.18.1", Hosts: c.Hosts,
			SSH: &kaov1.SSHSpec{
				PrivateKeySecretRef: kaov1.SecretKeyReference{Name: "ssh", Key: "id"},
				KnownHostsSecretRef: kaov1.SecretKeyReference{Name: "ssh", Key: "known_hosts"},
			},
			Artifacts: kaov1.ArtifactsSpec{LocalPath: bundleDir},
			Etcd:      kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{Version: controllertest.TestEtcdVersion}},
		},
	}
	if err := controllertest.K8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: pipeline.PKISecretName(kd), Namespace: ns}, Data: c.Bundle}
	if err := controllertest.K8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if installed {
		markInstalled(t, kd)
	}
	return kd
}

// markInstalled records a finished install in the deployment's status.
func markInstalled(t *testing.T, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	cur := controllertest.Get(t, kd)
	cur.Status.ObservedGeneration = cur.Generation
	if err := controllertest.K8s.Status().Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
}

// backupConditionIs matches a backup whose condition has the status and reason.
func backupConditionIs(t string, status metav1.ConditionStatus, reason string) func(*kaov1.EtcdBackup) bool {
	return func(eb *kaov1.EtcdBackup) bool {
		for _, c := range eb.Status.Conditions {
			if c.Type == t {
				return c.Status == status && c.Reason == reason && c.ObservedGeneration == eb.Generation
			}
		}
		return false
	}
}

// backupCondition returns one condition of a backup, or an empty one.
func backupCondition(eb *kaov1.EtcdBackup, t string) metav1.Condition {
	for _, c := range eb.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}

// startBackupOperator starts a manager with only the EtcdBackup controller.
// The operator's own bundle (--artifacts-dir) gives etcdutl unless o names one.
func startBackupOperator(t *testing.T, ns string, o pipeline.Options) {
	t.Helper()
	controllertest.RequireEnv(t)
	if o.ArtifactsDir == "" {
		o.ArtifactsDir = controllertest.BackupBundle(t, true)
	}
	controllertest.Env.StartManager(t, controllertest.Scheme, ns, func(mgr ctrl.Manager) error { return Setup(mgr, o) })
}

// backupEvents lists the reasons and notes of the Events about a backup.
func backupEvents(t *testing.T, eb *kaov1.EtcdBackup) []string {
	t.Helper()
	out := []string{}
	for _, e := range controllertest.DeploymentEvents(t, &kaov1.KarmadaDeployment{ObjectMeta: eb.ObjectMeta}) {
		if e.Regarding.Kind == "EtcdBackup" {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

// backupHostSecret makes dc's first host an SSH backup host for backups in
// ns: Secret backup-host holds the SSH key ("id"), the host's known_hosts
// ("known_hosts") and a known_hosts that pins another key for its address
// ("wrong_known_hosts"). dest is a destination on it, in dir, checked with
// one of those known_hosts.
func backupHostSecret(t *testing.T, ns string, dc *hosts.Cluster) (privateKey []byte, dest func(dir, knownHostsKey string) *kaov1.BackupDestination) {
	t.Helper()
	host := dc.Hosts()[0]
	privateKey, err := os.ReadFile(dc.PrivateKeyPath())
	if err != nil {
		t.Fatal(err)
	}
	knownHosts, err := os.ReadFile(dc.KnownHostsPath())
	if err != nil {
		t.Fatal(err)
	}
	wrongKey := filepath.Join(t.TempDir(), "other")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", wrongKey).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	otherPub, err := os.ReadFile(wrongKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "backup-host", Namespace: ns}, Data: map[string][]byte{
		"id": privateKey, "known_hosts": knownHosts,
		"wrong_known_hosts": []byte(host.Address + " " + strings.Join(strings.Fields(string(otherPub))[:2], " ") + "\n"),
	}}
	if err := controllertest.K8s.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	return privateKey, func(dir, knownHostsKey string) *kaov1.BackupDestination {
		return &kaov1.BackupDestination{Type: kaov1.SSHDestination, SSH: &kaov1.SSHBackupDestination{
			Address: host.Address, Port: int32(host.Port), User: host.User, Directory: dir,
			PrivateKeySecretRef: kaov1.SecretKeyReference{Name: secret.Name, Key: "id"},
			KnownHostsSecretRef: kaov1.SecretKeyReference{Name: secret.Name, Key: knownHostsKey},
		}}
	}
}
