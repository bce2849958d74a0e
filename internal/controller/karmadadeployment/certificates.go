package karmadadeployment

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/pki"
)

// Certificate renewal and rotation, as decisions from spec, status and the
// clock. ensurePKI (pki.go) does the issuing; decideRun (phases.go) starts
// the runs these ask for.
// maxPlainRotationRequest is the longest rotation request recorded as it is;
// longer ones are recorded by digest (see rotationRequestOf).
const maxPlainRotationRequest = 63

// rotationRequestOf is how a value of kaov1.RotateCertificatesAnnotation is
// recorded in status.certificateRenewal.rotationRequest: as it is when it is
// short printable ASCII, otherwise as "sha256:" and its digest, so that any
// new value asks for a rotation and status stays small and readable.
func rotationRequestOf(value string) string {
	plain := len(value) <= maxPlainRotationRequest
	for i := 0; plain && i < len(value); i++ {
		plain = value[i] >= ' ' && value[i] <= '~'
	}
	if plain {
		return value
	}
	sum := sha256.Sum256([]byte(value))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// pendingRotation returns the rotation request of the deployment's
// kaov1.RotateCertificatesAnnotation that kao has not handled yet, or "" when there
// is none: no annotation, an empty value, or the value handled last.
func pendingRotation(kd *kaov1.KarmadaDeployment) string {
	value := kd.Annotations[kaov1.RotateCertificatesAnnotation]
	if value == "" {
		return ""
	}
	req := rotationRequestOf(value)
	if r := kd.Status.CertificateRenewal; r != nil && r.RotationRequest == req {
		return ""
	}
	return req
}

// renewalDue tells whether the deployment's next certificate renewal
// (status.certificateRenewal.nextRenewalTime) has come, and when it comes
// otherwise (zero when none is scheduled). Certificates carry whole seconds
// and pki.Ensure decides on a clock truncated to the second: so does this,
// so that a run started for a renewal always finds it due.
func renewalDue(kd *kaov1.KarmadaDeployment, now time.Time) (due bool, at time.Time) {
	r := kd.Status.CertificateRenewal
	if r == nil || r.NextRenewalTime == nil {
		return false, time.Time{}
	}
	at = r.NextRenewalTime.Time
	return !now.Truncate(time.Second).Before(at), at
}

// renewalWait is how long to wait for a renewal at at: at least
// minRenewalRequeue.
func renewalWait(at, now time.Time) time.Duration {
	return max(at.Sub(now), minRenewalRequeue)
}

// nextRenewal is when kao must run next for the certificates of a bundle
// just ensured at now: when the first leaf enters its renewal window, or a CA
// expires (pki.NextCheck). nil when that is not after now: what is due then
// could not be renewed by this very call, and another run would not do better
// (pki.Ensure renews whatever is due when it is called).
func nextRenewal(certs []pki.Cert, renewBefore time.Duration, now time.Time) *metav1.Time {
	next := pki.NextCheck(certs, renewBefore)
	if next.IsZero() || !next.After(now.Truncate(time.Second)) {
		return nil
	}
	return pipeline.TimePtr(next)
}

// renewBeforeOf is spec.certificates.renewBefore, or pki's default.
func renewBeforeOf(kd *kaov1.KarmadaDeployment) time.Duration {
	if rb := kd.Spec.Certificates.RenewBefore; rb != nil {
		return rb.Duration
	}
	return pki.DefaultRenewBefore
}

// firstDue names the leaf certificate whose renewal window opens first, for
// logs and Events: the first entry of status.certificates (sorted by expiry)
// that is not a CA.
func firstDue(kd *kaov1.KarmadaDeployment) string {
	for _, c := range kd.Status.Certificates {
		if c.Name != pki.CA && c.Name != pki.FrontProxyCA && c.Name != pki.EtcdCA {
			return fmt.Sprintf("%s (expires %s)", c.Name, c.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	return "a certificate"
}
