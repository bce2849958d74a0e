package karmadadeployment

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/pki"
)

// pkiSecret reads a deployment's PKI Secret.
func pkiSecret(t *testing.T, kd *kaov1.KarmadaDeployment) map[string][]byte {
	t.Helper()
	s := &corev1.Secret{}
	if err := controllertest.K8s.Get(context.Background(), client.ObjectKey{Namespace: kd.Namespace, Name: kd.Name + "-pki"}, s); err != nil {
		t.Fatal(err)
	}
	return s.Data
}

// certOf parses a certificate of a PKI Secret.
func certOf(t *testing.T, data map[string][]byte, name string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data[pki.CertFile(name)])
	if block == nil {
		t.Fatalf("the PKI Secret has no %s", pki.CertFile(name))
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// adminNotAfter is the admin certificate's expiry in status.certificates.
func adminNotAfter(kd *kaov1.KarmadaDeployment) time.Time {
	for _, c := range kd.Status.Certificates {
		if c.Name == pki.AdminClient {
			return c.NotAfter.Time
		}
	}
	return time.Time{}
}

// TestCertificatesAreRenewedAheadOfExpiryWithoutAHuman gives a deployment
// one-minute certificates renewed 40 seconds before they expire: after the
// install, the operator wakes up when the first certificate enters its
// window (a Containerized deployment is not probed, so nothing else wakes
// it), runs, and the renewed certificates expire later, without a spec
// change, under the same CAs.
func TestCertificatesAreRenewedAheadOfExpiryWithoutAHuman(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	kd := newDeploymentWith(t, ns, "renewing", func(kd *kaov1.KarmadaDeployment) {
		kd.Spec.Certificates = kaov1.CertificatesSpec{
			Validity:    &metav1.Duration{Duration: time.Minute},
			RenewBefore: &metav1.Duration{Duration: 40 * time.Second},
		}
	}, "ok-a")

	first := controllertest.WaitFor(t, kd, runWait, "the install", lastRunIs(kaov1.RunSucceeded))
	firstRun, firstEnd := first.Status.LastRun.ID, adminNotAfter(first)
	r := first.Status.CertificateRenewal
	if r == nil || r.NextRenewalTime == nil || !r.NextRenewalTime.Time.Equal(firstEnd.Add(-40*time.Second)) {
		t.Fatalf("status.certificateRenewal after the install: %+v, want the next renewal 40s before %s", r, firstEnd)
	}
	if r.LastRenewalTime != nil {
		t.Errorf("lastRenewalTime is set after a first issue: %+v", r)
	}
	before := pkiSecret(t, first)

	renewed := controllertest.WaitFor(t, kd, runWait, "a second run that renewed the certificates", func(kd *kaov1.KarmadaDeployment) bool {
		return lastRunIs(kaov1.RunSucceeded)(kd) && kd.Status.LastRun.ID != firstRun && adminNotAfter(kd).After(firstEnd)
	})
	if renewed.Generation != first.Generation {
		t.Errorf("the spec changed (generation %d to %d): the renewal must need no change", first.Generation, renewed.Generation)
	}
	if !renewed.Status.LastRun.StartTime.Time.Before(firstEnd) {
		t.Errorf("the renewal run started at %s, after the old certificates expired at %s", renewed.Status.LastRun.StartTime.Time, firstEnd)
	}
	if rr := renewed.Status.CertificateRenewal; rr == nil || rr.LastRenewalTime == nil || rr.NextRenewalTime == nil || !rr.NextRenewalTime.After(r.NextRenewalTime.Time) {
		t.Errorf("status.certificateRenewal after the renewal: %+v", rr)
	}
	after := pkiSecret(t, renewed)
	if string(after["ca.crt"]) != string(before["ca.crt"]) || string(after["ca.key"]) != string(before["ca.key"]) {
		t.Error("the renewal replaced the CA")
	}
	if string(after["admin-client.key"]) == string(before["admin-client.key"]) {
		t.Error("the renewed admin certificate kept its key")
	}
	if c := certOf(t, after, pki.AdminClient); !c.NotAfter.Equal(adminNotAfter(renewed)) {
		t.Errorf("status.certificates says %s, the Secret's certificate %s", adminNotAfter(renewed), c.NotAfter)
	}
	ev := waitForEvent(t, kd, "CertificatesRenewing")
	if !strings.Contains(ev.Note, "renewal window") {
		t.Errorf("the CertificatesRenewing Event does not say why: %q", ev.Note)
	}
}

// TestRotateCertificatesAnnotationReissuesEveryLeafOnce sets
// kao.io/rotate-certificates: every leaf certificate is re-issued under the
// same CAs in one run, the value is recorded, and another reconcile with the
// same value starts no run.
func TestRotateCertificatesAnnotationReissuesEveryLeafOnce(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	kd := newDeploymentWith(t, ns, "rotating", func(*kaov1.KarmadaDeployment) {}, "ok-a")
	first := controllertest.WaitFor(t, kd, runWait, "the install", lastRunIs(kaov1.RunSucceeded))
	before := pkiSecret(t, first)

	annotate := func(key, value string) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur := controllertest.Get(t, kd)
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			cur.Annotations[key] = value
			return controllertest.K8s.Update(context.Background(), cur)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	annotate(kaov1.RotateCertificatesAnnotation, "2026-11-23 incident 42")
	rotated := controllertest.WaitFor(t, kd, runWait, "a run for the rotation", func(kd *kaov1.KarmadaDeployment) bool {
		return lastRunIs(kaov1.RunSucceeded)(kd) && kd.Status.LastRun.ID != first.Status.LastRun.ID
	})
	if r := rotated.Status.CertificateRenewal; r == nil || r.RotationRequest != "2026-11-23 incident 42" || r.LastRenewalTime == nil {
		t.Errorf("status.certificateRenewal after the rotation: %+v", r)
	}
	after := pkiSecret(t, rotated)
	for _, c := range rotated.Status.Certificates {
		same := string(after[pki.CertFile(c.Name)]) == string(before[pki.CertFile(c.Name)]) &&
			string(after[pki.KeyFile(c.Name)]) == string(before[pki.KeyFile(c.Name)])
		isCA := c.Name == pki.CA || c.Name == pki.FrontProxyCA || c.Name == pki.EtcdCA
		if isCA && !same {
			t.Errorf("the rotation replaced %s: CAs stay", c.Name)
		}
		if !isCA && same {
			t.Errorf("the rotation kept %s", c.Name)
		}
	}
	if string(after["sa.key"]) != string(before["sa.key"]) {
		t.Error("the rotation replaced sa.key")
	}
	waitForEvent(t, kd, "CertificatesRotating")

	// The handled value asks for nothing more: another annotation wakes the
	// reconciler, and no run starts.
	annotate("example.com/note", "woken")
	time.Sleep(3 * time.Second)
	if cur := controllertest.Get(t, kd); cur.Status.LastRun.ID != rotated.Status.LastRun.ID || cur.Status.Progress != nil {
		t.Fatalf("the same rotation request started another run: %+v", cur.Status.LastRun)
	}
	// A value too long for status is recorded by digest, and rotates again.
	long := strings.Repeat("rotate-", 20)
	annotate(kaov1.RotateCertificatesAnnotation, long)
	again := controllertest.WaitFor(t, kd, runWait, "a run for the second rotation", func(kd *kaov1.KarmadaDeployment) bool {
		return lastRunIs(kaov1.RunSucceeded)(kd) && kd.Status.LastRun.ID != rotated.Status.LastRun.ID
	})
	if r := again.Status.CertificateRenewal; r == nil || r.RotationRequest != rotationRequestOf(long) || !strings.HasPrefix(r.RotationRequest, "sha256:") {
		t.Errorf("status.certificateRenewal after a long request: %+v", r)
	}
	if string(pkiSecret(t, again)["admin-client.key"]) == string(after["admin-client.key"]) {
		t.Error("the second rotation kept the admin key")
	}
}
