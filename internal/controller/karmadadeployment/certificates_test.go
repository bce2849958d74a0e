package karmadadeployment

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/pki"
)

func TestRotationRequestOf(t *testing.T) {
	long := strings.Repeat("x", maxPlainRotationRequest+1)
	tests := []struct {
		// value is the annotation's value.
		value string
		// want is what status records; "sha256:" alone means a digest.
		want string
	}{
		{value: "2026-11-23", want: "2026-11-23"},
		{value: "after the incident #42", want: "after the incident #42"},
		{value: strings.Repeat("y", maxPlainRotationRequest), want: strings.Repeat("y", maxPlainRotationRequest)},
		{value: long, want: "sha256:"},
		{value: "line\nbreak", want: "sha256:"},
		{value: "ünïcode", want: "sha256:"},
	}
	for _, tc := range tests {
		got := rotationRequestOf(tc.value)
		if tc.want == "sha256:" {
			if !strings.HasPrefix(got, "sha256:") || len(got) != 71 {
				t.Errorf("rotationRequestOf(%q) = %q, want sha256: and 64 hex digits", tc.value, got)
			}
			if got == rotationRequestOf(tc.value+"z") {
				t.Errorf("rotationRequestOf(%q): two values share a digest", tc.value)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("rotationRequestOf(%q) = %q, want %q", tc.value, got, tc.want)
		}
	}
}

func TestNextRenewal(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	certs := func(leafEnd time.Time) []pki.Cert {
		return []pki.Cert{
			{Name: pki.CA, NotAfter: now.Add(10 * 365 * 24 * time.Hour)},
			{Name: pki.AdminClient, Issuer: pki.CA, NotAfter: leafEnd},
		}
	}
	tests := []struct {
		// name says what the case proves.
		name string
		// certs are the certificates just ensured.
		certs []pki.Cert
		// renewBefore is spec.certificates.renewBefore.
		renewBefore time.Duration
		// want is the next renewal; zero means none.
		want time.Time
	}{
		{name: "a leaf's window opens renewBefore before it expires", certs: certs(now.Add(6 * time.Minute)),
			renewBefore: 4 * time.Minute, want: now.Add(2 * time.Minute)},
		{name: "a window that opens now is not scheduled: this very call could not renew it", certs: certs(now.Add(4 * time.Minute)),
			renewBefore: 4 * time.Minute},
		{name: "nothing issued, nothing scheduled", renewBefore: time.Hour},
		{name: "the default renewBefore is thirty days", certs: certs(now.Add(365 * 24 * time.Hour)),
			want: now.Add(335 * 24 * time.Hour)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := nextRenewal(tc.certs, tc.renewBefore, now)
			switch {
			case tc.want.IsZero() && got != nil:
				t.Errorf("next renewal %s, want none", got.Time)
			case !tc.want.IsZero() && (got == nil || !got.Time.Equal(tc.want)):
				t.Errorf("next renewal %v, want %s", got, tc.want)
			}
		})
	}
}

func TestDecideRunRenewsRotatesAndBacksOff(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return pipeline.TimePtr(now.Add(d)) }
	succeeded := &kaov1.RunStatus{ID: "r1", Generation: 1, Result: kaov1.RunSucceeded}
	failed := &kaov1.RunStatus{ID: "r1", Generation: 1, Result: kaov1.RunFailed}
	tests := []struct {
		// name says what the case proves.
		name string
		// last is status.lastRun; retry is status.retry.
		last  *kaov1.RunStatus
		retry *kaov1.RetryStatus
		// renewal is status.certificateRenewal.
		renewal *kaov1.CertificateRenewalStatus
		// annotations are the deployment's annotations.
		annotations map[string]string
		// userRoles is how many user roles the spec has; digest and
		// recorded are the roles' digest now and in status.
		userRoles        int
		digest, recorded string
		// wantRun, wantTrigger, wantRecheck and wantWait are the decision.
		wantRun     bool
		wantTrigger runTrigger
		wantRecheck time.Duration
		wantWait    time.Duration
	}{
		{name: "up to date: wait for the next renewal", last: succeeded,
			renewal: &kaov1.CertificateRenewalStatus{NextRenewalTime: at(90 * time.Second)}, wantRecheck: 90 * time.Second},
		{name: "a renewal due now runs", last: succeeded,
			renewal: &kaov1.CertificateRenewalStatus{NextRenewalTime: at(0)}, wantRun: true, wantTrigger: renewalTrigger},
		{name: "a renewal overdue runs", last: succeeded,
			renewal: &kaov1.CertificateRenewalStatus{NextRenewalTime: at(-time.Hour)}, wantRun: true, wantTrigger: renewalTrigger},
		{name: "a renewal due within the current second is not due yet: certificates carry whole seconds", last: succeeded,
			renewal: &kaov1.CertificateRenewalStatus{NextRenewalTime: at(500 * time.Millisecond)}, wantRecheck: minRenewalRequeue},
		{name: "no renewal scheduled: nothing to wait for", last: succeeded, renewal: &kaov1.CertificateRenewalStatus{}},
		{name: "a new rotation request runs", last: succeeded,
			renewal:     &kaov1.CertificateRenewalStatus{NextRenewalTime: at(time.Hour), RotationRequest: "old"},
			annotations: map[string]string{kaov1.RotateCertificatesAnnotation: "new"}, wantRun: true, wantTrigger: rotationTrigger},
		{name: "a handled rotation request does not run again", last: succeeded,
			renewal:     &kaov1.CertificateRenewalStatus{NextRenewalTime: at(time.Hour), RotationRequest: "same"},
			annotations: map[string]string{kaov1.RotateCertificatesAnnotation: "same"}, wantRecheck: time.Hour},
		{name: "an empty rotation request asks for nothing", last: succeeded,
			annotations: map[string]string{kaov1.RotateCertificatesAnnotation: ""}},
		{name: "a long rotation request handled by digest does not run again", last: succeeded,
			renewal:     &kaov1.CertificateRenewalStatus{RotationRequest: rotationRequestOf(strings.Repeat("r", 100))},
			annotations: map[string]string{kaov1.RotateCertificatesAnnotation: strings.Repeat("r", 100)}},
		{name: "a restore holds even a due renewal", last: succeeded,
			renewal:     &kaov1.CertificateRenewalStatus{NextRenewalTime: at(-time.Minute)},
			annotations: map[string]string{kaov1.RestoreInProgressAnnotation: "r"}},
		{name: "after a failed run, the backoff applies to a due renewal too", last: failed,
			retry:   &kaov1.RetryStatus{Failures: 1, Generation: 1, NextRetryTime: at(15 * time.Second)},
			renewal: &kaov1.CertificateRenewalStatus{NextRenewalTime: at(-time.Minute)}, wantWait: 15 * time.Second},
		{name: "a renewal that could not start backs off", last: succeeded,
			retry:   &kaov1.RetryStatus{Failures: 2, Generation: 1, NextRetryTime: at(30 * time.Second)},
			renewal: &kaov1.CertificateRenewalStatus{NextRenewalTime: at(-time.Minute)}, wantWait: 30 * time.Second},
		{name: "a run that could not start is retried after its backoff, due or not", last: succeeded,
			retry:   &kaov1.RetryStatus{Failures: 2, Generation: 1, NextRetryTime: at(-time.Second)},
			renewal: &kaov1.CertificateRenewalStatus{NextRenewalTime: at(time.Hour)}, wantRun: true},
		{name: "changed user role files run", last: succeeded, userRoles: 1, digest: "sha256:b", recorded: "sha256:a",
			wantRun: true, wantTrigger: userRolesTrigger},
		{name: "unreadable user roles run, so the run says why", last: succeeded, userRoles: 1, digest: unreadableUserRoles, recorded: "sha256:a",
			wantRun: true, wantTrigger: userRolesTrigger},
		{name: "unchanged user role files do not run", last: succeeded, userRoles: 1, digest: "sha256:a", recorded: "sha256:a"},
		{name: "a digest left from removed user roles does not run", last: succeeded, recorded: "sha256:a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kd := &kaov1.KarmadaDeployment{ObjectMeta: metav1.ObjectMeta{Generation: 1, Annotations: tc.annotations}}
			kd.Status.LastRun, kd.Status.Retry, kd.Status.CertificateRenewal = tc.last, tc.retry, tc.renewal
			kd.Status.UserRolesDigest = tc.recorded
			for range tc.userRoles {
				kd.Spec.Addons.UserRoles = append(kd.Spec.Addons.UserRoles, kaov1.UserRole{Name: "r"})
			}
			d := decideRun(kd, now, tc.digest)
			if d.run != tc.wantRun || d.trigger != tc.wantTrigger || d.recheck != tc.wantRecheck || d.wait != tc.wantWait {
				t.Errorf("decideRun = %+v, want run=%v trigger=%v recheck=%s wait=%s", d, tc.wantRun, tc.wantTrigger, tc.wantRecheck, tc.wantWait)
			}
			if d.reason == "" {
				t.Error("the decision gives no reason")
			}
		})
	}
}

// TestKeptTrustRoots names, for the Event of an adopted PKI Secret, the
// trust roots the Secret had that were not issued anew.
func TestKeptTrustRoots(t *testing.T) {
	all := pki.Bundle{pki.CertFile(pki.CA): []byte("x"), pki.CertFile(pki.FrontProxyCA): []byte("x"),
		pki.CertFile(pki.EtcdCA): []byte("x"), pki.ServiceAccountKeyFile: []byte("x")}
	noEtcd := pki.Bundle{pki.CertFile(pki.CA): []byte("x"), pki.CertFile(pki.FrontProxyCA): []byte("x"), pki.ServiceAccountKeyFile: []byte("x")}
	for _, tc := range []struct {
		bundle  pki.Bundle
		changed []string
		want    string
	}{
		{bundle: all, changed: []string{pki.AdminClient}, want: "ca, front-proxy-ca, etcd-ca, the service-account key"},
		{bundle: all, changed: []string{pki.CA, pki.AdminClient}, want: "front-proxy-ca, etcd-ca, the service-account key"},
		{bundle: noEtcd, changed: []string{pki.ServiceAccount}, want: "ca, front-proxy-ca"},
	} {
		if got := strings.Join(keptTrustRoots(tc.bundle, tc.changed), ", "); got != tc.want {
			t.Errorf("keptTrustRoots(%v) = %q, want %q", tc.changed, got, tc.want)
		}
	}
}
