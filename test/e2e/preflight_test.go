package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/test/hosts"
)

// binaryDeployment describes a Binary control plane on the test hosts: etcd on
// all three, karmada-apiserver on the first two behind an endpoint, the other
// components on the last two.
func binaryDeployment(ns, name, sshSecret string, hs []hosts.Host) *kaov1.KarmadaDeployment {
	roles := [][]kaov1.HostRole{
		{kaov1.EtcdRole, kaov1.APIServerRole},
		{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole},
		{kaov1.EtcdRole, kaov1.ControlPlaneRole},
	}
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:    kaov1.BinaryMode,
			Version: "v1.18.1",
			SSH: &kaov1.SSHSpec{
				PrivateKeySecretRef: kaov1.SecretKeyReference{Name: sshSecret, Key: "id_ed25519"},
				KnownHostsSecretRef: kaov1.SecretKeyReference{Name: sshSecret, Key: "known_hosts"},
			},
			APIServer: kaov1.APIServerSpec{Endpoint: hs[0].Address + ":5443"},
			Etcd:      kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
		},
	}
	for i, h := range hs {
		kd.Spec.Hosts = append(kd.Spec.Hosts, kaov1.Host{Name: h.Name, Address: h.Address, Port: int32(h.Port), User: h.User, Roles: roles[i%len(roles)]})
	}
	return kd
}

// TestBinaryPreflightOverSSH runs the install playbook against three real SSH
// hosts with pinned host keys, and shows that a changed host key is refused.
func TestBinaryPreflightOverSSH(t *testing.T) {
	dc := hosts.Start(t, 3)
	ctx := context.Background()
	ns := newNamespace(t)
	stateDir := startOperator(t, ns)

	key, err := os.ReadFile(dc.PrivateKeyPath())
	if err != nil {
		t.Fatal(err)
	}
	knownHosts, err := os.ReadFile(dc.KnownHostsPath())
	if err != nil {
		t.Fatal(err)
	}
	createSecret(t, ns, "dc-ssh", map[string][]byte{"id_ed25519": key, "known_hosts": knownHosts})

	kd := binaryDeployment(ns, "dc", "dc-ssh", dc.Hosts())
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	done := waitForRun(t, kd, 3*time.Minute)
	if done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the run over SSH failed: %+v", done.Status.LastRun)
	}
	stats := map[string]kaov1.HostRunStats{}
	for _, h := range done.Status.LastRun.Hosts {
		stats[h.Name] = h
	}
	for _, h := range dc.Hosts() {
		if s := stats[h.Name]; s.OK < 4 || s.Failed != 0 || s.Unreachable != 0 {
			t.Errorf("host %s did not run the preflight: %+v", h.Name, s)
		}
	}

	// Pin the first host's name to the second host's key: SSH must refuse it,
	// and kao must say so, never trust the new key.
	lines := strings.Split(strings.TrimSpace(string(knownHosts)), "\n")
	first, second := dc.Hosts()[0], dc.Hosts()[1]
	wrong := []string{}
	for _, l := range lines {
		fields := strings.Fields(l)
		if len(fields) != 3 {
			continue
		}
		patterns := strings.Split(fields[0], ",")
		if slices.Contains(patterns, first.Address) {
			continue
		}
		wrong = append(wrong, l)
		if slices.Contains(patterns, second.Address) {
			wrong = append(wrong, first.Address+" "+fields[1]+" "+fields[2])
		}
	}
	createSecret(t, ns, "dc-ssh-wrong", map[string][]byte{"id_ed25519": key, "known_hosts": []byte(strings.Join(wrong, "\n") + "\n")})
	bad := binaryDeployment(ns, "dc-wrong-key", "dc-ssh-wrong", dc.Hosts())
	if err := k8s.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	failed := waitForRun(t, bad, 3*time.Minute)
	last := failed.Status.LastRun
	if last.Result != kaov1.RunFailed {
		t.Fatalf("a changed host key was accepted: %+v", last)
	}
	refused := false
	for _, f := range last.FailedTasks {
		if f.Host == first.Name && f.Unreachable && strings.Contains(f.Message, "Host key verification failed") {
			refused = true
		}
		if f.Host != first.Name {
			t.Errorf("only %s has a wrong key, but %s failed: %+v", first.Name, f.Host, f)
		}
	}
	if !refused {
		t.Errorf("the failure does not say the host key was refused: %+v", last.FailedTasks)
	}
	c := failed.Status.Conditions
	found := false
	for _, cond := range c {
		found = found || cond.Type == kaov1.PlaybookSucceededCondition && cond.Reason == kaov1.HostUnreachableReason
	}
	if !found {
		t.Errorf("PlaybookSucceeded does not say a host was unreachable: %+v", c)
	}

	// The SSH private key must not appear anywhere kao writes.
	keyBody := strings.Split(strings.TrimSpace(string(key)), "\n")[1]
	status, _ := json.Marshal([]any{get(t, kd).Status, failed.Status})
	evs, _ := json.Marshal(append(deploymentEvents(t, kd), deploymentEvents(t, bad)...))
	places := map[string]string{"status": string(status), "Events": string(evs), "operator log": operatorLog.String()}
	_ = filepath.Walk(stateDir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			data, _ := os.ReadFile(path)
			places[path] = string(data)
		}
		return nil
	})
	for where, text := range places {
		if strings.Contains(text, keyBody) {
			t.Errorf("the SSH private key leaked into %s", where)
		}
	}
}
