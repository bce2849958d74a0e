package karmadadeployment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/pki"
)

// ensurePKI issues or renews the deployment's certificates, keeps them in a
// Secret owned by the deployment, and records their expiry and the next
// renewal in status. A pending rotation request (kaov1.RotateCertificatesAnnotation)
// re-issues every leaf certificate and is recorded as handled.
func (r *Reconciler) ensurePKI(ctx context.Context, kd *kaov1.KarmadaDeployment, now time.Time) (pki.Bundle, error) {
	secret, exists, stale, err := r.pkiSecret(ctx, kd)
	if err != nil {
		return nil, err
	}
	key := client.ObjectKeyFromObject(secret)
	rotation := pendingRotation(kd)
	hadCerts := len(secret.Data) > 0
	// A Secret a user made for the deployment before its first issue (no
	// kao label): its CAs and service-account key are kept, as after an
	// export from a lost plane (docs/disaster-recovery.md).
	adopting := exists && !stale && hadCerts && secret.Labels[kaov1.DeploymentUIDLabel] == ""
	req := issueRequest(kd, hadCerts)
	bundle, certs, changed, err := pki.Ensure(pki.Bundle(secret.Data), req, now)
	var broken *pki.TrustRootError
	if errors.As(err, &broken) {
		setCondition(kd, kaov1.CertificatesValidCondition, metav1.ConditionFalse, kaov1.TrustRootUnusableReason, err.Error())
	}
	if err != nil {
		return nil, reason.Missing("issuing certificates from Secret %s: %v", key, err)
	}
	if len(changed) > 0 || !exists || stale || adopting {
		secret.Type = corev1.SecretTypeOpaque
		secret.Data = bundle
		if err := claimSecret(secret, kd, r.Client.Scheme()); err != nil {
			return nil, fmt.Errorf("owning Secret %s: %w", key, err)
		}
		if exists {
			err = r.Client.Update(ctx, secret)
		} else {
			err = r.Client.Create(ctx, secret)
		}
		if err != nil {
			return nil, fmt.Errorf("storing certificates in Secret %s: %w", key, err)
		}
		if len(changed) > 0 {
			sort.Strings(changed)
			r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "CertificatesIssued", "Issue",
				"Issued %s", pipeline.TruncateString(strings.Join(changed, ", "), 900))
		}
	}
	if kept := keptTrustRoots(bundle, changed); adopting && len(kept) > 0 {
		r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "TrustRootsAdopted", "Adopt",
			"Secret %s existed before this deployment: kept %s from it and issued the rest under them",
			key.Name, strings.Join(kept, ", "))
	}
	kd.Status.Certificates = certificateStatus(certs, key.Name)
	renewal := &kaov1.CertificateRenewalStatus{}
	if kd.Status.CertificateRenewal != nil {
		renewal = kd.Status.CertificateRenewal.DeepCopy()
	}
	if rotation != "" {
		renewal.RotationRequest = rotation
		if req.Reissue {
			r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "CertificatesRotating", "Rotate",
				"Rotating certificates for %s=%q: re-issued every leaf certificate; the install run rolls them out and restarts every component, one host at a time",
				kaov1.RotateCertificatesAnnotation, rotation)
		}
	}
	if hadCerts && renewedLeaves(changed) {
		renewal.LastRenewalTime = pipeline.TimePtr(now)
	}
	renewal.NextRenewalTime = nextRenewal(certs, renewBeforeOf(kd), now)
	if renewal.NextRenewalTime == nil && len(certs) > 0 {
		ctrl.LoggerFrom(ctx).Info("No certificate renewal is scheduled: what is due now could not be renewed", "certificates", len(certs))
	}
	kd.Status.CertificateRenewal = renewal
	return bundle, nil
}

// pkiSecret reads the deployment's PKI Secret: exists is false when there
// is none (an empty Secret of its name comes back). A Secret that a deleted
// deployment of the same name left (the garbage collector has not removed
// it yet) is stale and comes back without data: its certificates are not
// this deployment's, which starts with a PKI of its own.
func (r *Reconciler) pkiSecret(ctx context.Context, kd *kaov1.KarmadaDeployment) (secret *corev1.Secret, exists, stale bool, err error) {
	key := types.NamespacedName{Namespace: kd.Namespace, Name: pipeline.PKISecretName(kd)}
	secret = &corev1.Secret{}
	exists = true
	if err := r.APIReader.Get(ctx, key, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, false, false, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		exists = false
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	}
	if stale, err = pipeline.OwnedByAnother(secret, kd); err != nil {
		return nil, false, false, err
	}
	if stale {
		secret.Data = nil
	}
	return secret, exists, stale, nil
}

// issueRequest is what pki.Ensure is asked for: the deployment's
// certificates, every leaf re-issued when a rotation is pending and there
// are certificates to rotate.
func issueRequest(kd *kaov1.KarmadaDeployment, hadCerts bool) pki.Request {
	req := pipeline.PKIRequest(kd)
	req.Reissue = pendingRotation(kd) != "" && hadCerts
	return req
}

// keptTrustRoots names the CAs and the service-account key of bundle that
// changed (as from pki.Ensure) does not name: those kept from the Secret.
func keptTrustRoots(bundle pki.Bundle, changed []string) []string {
	var kept []string
	for _, name := range pki.CAs {
		if len(bundle[pki.CertFile(name)]) > 0 && !slices.Contains(changed, name) {
			kept = append(kept, name)
		}
	}
	if len(bundle[pki.ServiceAccountKeyFile]) > 0 && !slices.Contains(changed, pki.ServiceAccount) {
		kept = append(kept, "the service-account key")
	}
	return kept
}

// renewedLeaves tells whether changed (as from pki.Ensure) names a leaf
// certificate: anything but the CAs and the service-account key.
func renewedLeaves(changed []string) bool {
	for _, name := range changed {
		if name != pki.ServiceAccount && !slices.Contains(pki.CAs, name) {
			return true
		}
	}
	return false
}

// certificateStatus lists issued certificates for status, soonest expiry first.
func certificateStatus(certs []pki.Cert, secret string) []kaov1.CertificateStatus {
	out := make([]kaov1.CertificateStatus, 0, len(certs))
	for _, c := range certs {
		out = append(out, kaov1.CertificateStatus{
			Name: c.Name, SecretName: secret, NotBefore: pipeline.TimePtr(c.NotBefore), NotAfter: metav1.NewTime(c.NotAfter),
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].NotAfter.Equal(&out[j].NotAfter) {
			return out[i].NotAfter.Before(&out[j].NotAfter)
		}
		return out[i].Name < out[j].Name
	})
	if len(out) > 64 {
		out = out[:64]
	}
	return out
}

// setCertificatesCondition says whether every issued certificate is valid and
// outside its renewal window.
func setCertificatesCondition(kd *kaov1.KarmadaDeployment, now time.Time) {
	certs := kd.Status.Certificates
	if len(certs) == 0 {
		return
	}
	renewBefore := renewBeforeOf(kd)
	first := certs[0] // sorted by expiry
	switch {
	case now.After(first.NotAfter.Time):
		setCondition(kd, kaov1.CertificatesValidCondition, metav1.ConditionFalse, kaov1.CertificatesExpiredReason,
			fmt.Sprintf("certificate %s expired at %s", first.Name, first.NotAfter.UTC().Format(time.RFC3339)))
	case now.Add(renewBefore).After(first.NotAfter.Time):
		setCondition(kd, kaov1.CertificatesValidCondition, metav1.ConditionFalse, kaov1.CertificatesExpiringReason,
			fmt.Sprintf("certificate %s expires at %s, inside its renewal window", first.Name, first.NotAfter.UTC().Format(time.RFC3339)))
	default:
		setCondition(kd, kaov1.CertificatesValidCondition, metav1.ConditionTrue, kaov1.CertificatesCurrentReason,
			fmt.Sprintf("%d certificates valid; the first to expire is %s at %s", len(certs), first.Name, first.NotAfter.UTC().Format(time.RFC3339)))
	}
}
