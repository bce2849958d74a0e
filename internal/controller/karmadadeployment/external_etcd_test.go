package karmadadeployment

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
)

// ansibleSHA1 is what Ansible's file lookup and hash('sha1') print for a file.
func ansibleSHA1(data []byte) string {
	sum := sha1.Sum(bytes.TrimRight(data, "\n"))
	return hex.EncodeToString(sum[:])
}

// TestExternalEtcdMaterialReachesTheRun proves that the CA and client
// certificate of spec.etcd.external reach the run under the names the API
// server roles read, and that a client Secret without its key is a condition
// naming the Secret, with no run started.
func TestExternalEtcdMaterialReachesTheRun(t *testing.T) {
	ctx := context.Background()
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	caPEM, _ := controllertest.SelfSignedPair(t, "user-etcd-ca")
	clientPEM, clientKey := controllertest.SelfSignedPair(t, "user-etcd-client")
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "etcd-ca", Namespace: ns}, Data: map[string][]byte{"ca.crt": caPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "etcd-client", Namespace: ns}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": clientPEM, "tls.key": clientKey}},
		{ObjectMeta: metav1.ObjectMeta{Name: "etcd-client-nokey", Namespace: ns}, Data: map[string][]byte{"tls.crt": clientPEM}},
	} {
		if err := controllertest.K8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	external := func(name, clientSecret string) *kaov1.KarmadaDeployment {
		kd := &kaov1.KarmadaDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: kaov1.KarmadaDeploymentSpec{
				Mode: kaov1.ContainerizedMode, Version: "v1.18.1",
				HostCluster: &kaov1.HostClusterSpec{InCluster: true, Namespace: ns + "-" + name},
				Artifacts:   kaov1.ArtifactsSpec{ImageRegistry: controllertest.TestImageRegistry},
				Etcd: kaov1.EtcdSpec{External: &kaov1.ExternalEtcd{
					Endpoints:            []string{"https://10.0.0.5:2379"},
					CASecretRef:          kaov1.SecretKeyReference{Name: "etcd-ca", Key: "ca.crt"},
					ClientCertSecretName: clientSecret,
				}},
			},
		}
		if err := controllertest.K8s.Create(ctx, kd); err != nil {
			t.Fatal(err)
		}
		return kd
	}

	good := controllertest.WaitFor(t, external("ext", "etcd-client"), 60*time.Second, "a successful run", lastRunIs(kaov1.RunSucceeded))
	digests := "/tmp/kao-test-" + ns + "-ext.digests"
	t.Cleanup(func() { _ = os.Remove(digests) })
	recorded, err := os.ReadFile(digests)
	if err != nil {
		t.Fatalf("the test playbook recorded no digests: %v", err)
	}
	want := "external etcd ca " + ansibleSHA1(caPEM) + " client " + ansibleSHA1(clientPEM) + " aggregated " + ansibleSHA1(clientPEM)
	if strings.TrimSpace(string(recorded)) != want {
		t.Errorf("the run did not get the external etcd files:\n got %q\nwant %q", recorded, want)
	}
	if log := readRunLog(t, good); strings.Contains(log, strings.Split(string(clientKey), "\n")[1]) {
		t.Error("the external etcd client key leaked into the run log")
	}

	bad := external("ext-nokey", "etcd-client-nokey")
	got := controllertest.WaitFor(t, bad, 20*time.Second, "PrerequisitesMissing", func(kd *kaov1.KarmadaDeployment) bool {
		c := condition(kd, kaov1.PlaybookSucceededCondition)
		return c != nil && c.Reason == kaov1.PrerequisitesMissingReason
	})
	msg := condition(got, kaov1.PlaybookSucceededCondition).Message
	if !strings.Contains(msg, "etcd-client-nokey") || !strings.Contains(msg, "tls.key") {
		t.Errorf("the condition does not say which Secret lacks which key: %q", msg)
	}
	if got.Status.LastRun != nil {
		t.Errorf("no run may start without the etcd client key: %+v", got.Status.LastRun)
	}
}
