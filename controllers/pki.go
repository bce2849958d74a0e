package controllers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/pki"
)

// Defaults of fields the API leaves optional.
const (
	defaultSecurePort    = 5443
	defaultServiceSubnet = "10.96.0.0/12"
)

// pkiSecretName names the Secret holding a deployment's certificates and keys.
func pkiSecretName(kd *kaov1.KarmadaDeployment) string {
	return truncateString(kd.Name, 249) + "-pki"
}

// pkiRequest describes the certificates a deployment needs.
func pkiRequest(kd *kaov1.KarmadaDeployment) pki.Request {
	spec := kd.Spec
	req := pki.Request{
		ExtraSANs:     spec.APIServer.CertSANs,
		ServiceSubnet: spec.APIServer.ServiceSubnet,
		ExternalEtcd:  spec.Etcd.External != nil,
	}
	if req.ServiceSubnet == "" {
		req.ServiceSubnet = defaultServiceSubnet
	}
	for _, h := range spec.Hosts {
		host := pki.Host{Name: h.Name, Address: h.Address}
		for _, role := range h.Roles {
			switch role {
			case kaov1.EtcdRole:
				req.EtcdHosts = append(req.EtcdHosts, host)
			case kaov1.APIServerRole:
				req.APIServerHosts = append(req.APIServerHosts, host)
			case kaov1.ControlPlaneRole:
				req.ControlPlaneHosts = append(req.ControlPlaneHosts, host)
			}
		}
	}
	if spec.Mode == kaov1.ContainerizedMode {
		// The components reach each other through the host cluster's Services;
		// each etcd member is a pod of the StatefulSet with its own DNS name.
		req.ServerSANs = map[string][]string{
			pki.APIServerServer:           serviceNames(kd, hostAPIServer),
			pki.AggregatedAPIServerServer: serviceNames(kd, hostAggregatedAPIServer),
			pki.WebhookServer:             serviceNames(kd, hostWebhook),
			pki.SearchServer:              serviceNames(kd, hostSearch),
			pki.MetricsAdapterServer:      serviceNames(kd, hostMetricsAdapter),
		}
		// karmada-scheduler and karmada-descheduler dial each member's
		// estimator at its Service's name, and verify it.
		for _, m := range spec.Members {
			req.ServerSANs[pki.EstimatorServer] = append(req.ServerSANs[pki.EstimatorServer],
				serviceNames(kd, estimatorComponentPfx+"-"+m.Name)...)
		}
		if spec.Etcd.Managed != nil {
			clientNames := append(serviceNames(kd, hostEtcdClient), hostEtcdClient)
			for _, pod := range etcdMemberNames(kd) {
				names := serviceNames(kd, hostEtcd)
				req.EtcdHosts = append(req.EtcdHosts, pki.Host{
					Name: pod, Address: pod + "." + names[1],
					SANs: append([]string{pod + "." + names[0]}, clientNames...),
				})
			}
		}
	}
	req.Addons = pki.Addons{
		Search:             addonEnabled(spec.Addons.Search),
		MetricsAdapter:     addonEnabled(spec.Addons.MetricsAdapter),
		Descheduler:        addonEnabled(spec.Addons.Descheduler),
		SchedulerEstimator: addonEnabled(spec.Addons.SchedulerEstimator),
	}
	for _, m := range spec.Members {
		if m.SyncMode == kaov1.PullSyncMode {
			req.PullMembers = append(req.PullMembers, m.Name)
		}
	}
	req.Endpoint = apiEndpoint(kd)
	c := spec.Certificates
	if c.Validity != nil {
		req.Validity = c.Validity.Duration
	}
	if c.CAValidity != nil {
		req.CAValidity = c.CAValidity.Duration
	}
	if c.RenewBefore != nil {
		req.RenewBefore = c.RenewBefore.Duration
	}
	return req
}

// apiEndpoint is the host:port clients reach karmada-apiserver at: the spec's
// endpoint, else the first apiServer host (Binary) or the address the host
// cluster gave its Service (Containerized, resolved before each install run
// into status.endpoint).
func apiEndpoint(kd *kaov1.KarmadaDeployment) string {
	if kd.Spec.APIServer.Endpoint != "" {
		return kd.Spec.APIServer.Endpoint
	}
	if kd.Spec.Mode == kaov1.ContainerizedMode {
		return kd.Status.Endpoint
	}
	port := int(kd.Spec.APIServer.SecurePort)
	if port == 0 {
		port = defaultSecurePort
	}
	for _, h := range kd.Spec.Hosts {
		for _, role := range h.Roles {
			if role == kaov1.APIServerRole {
				return net.JoinHostPort(h.Address, strconv.Itoa(port))
			}
		}
	}
	return ""
}

// readPKI reads a deployment's certificate bundle.
func (g *gatherer) readPKI(ctx context.Context, kd *kaov1.KarmadaDeployment) (pki.Bundle, error) {
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: kd.Namespace, Name: pkiSecretName(kd)}
	if err := g.APIReader.Get(ctx, key, secret); err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if stale, err := ownedByAnother(secret, kd); err != nil || stale {
		return nil, fmt.Errorf("the certificates' Secret %s is not this deployment's: it belongs to another KarmadaDeployment", key)
	}
	return pki.Bundle(secret.Data), nil
}

// ensurePKI issues or renews the deployment's certificates, keeps them in a
// Secret owned by the deployment, and records their expiry and the next
// renewal in status. A pending rotation request (kaov1.RotateCertificatesAnnotation)
// re-issues every leaf certificate and is recorded as handled.
func (r *KarmadaDeploymentReconciler) ensurePKI(ctx context.Context, kd *kaov1.KarmadaDeployment, now time.Time) (pki.Bundle, error) {
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: kd.Namespace, Name: pkiSecretName(kd)}
	exists := true
	if err := r.APIReader.Get(ctx, key, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		exists = false
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	}
	stale, err := ownedByAnother(secret, kd)
	if err != nil {
		return nil, err
	}
	if stale {
		// A deployment of the same name that was deleted left it (the
		// garbage collector has not removed it yet): its certificates are
		// not this deployment's, which starts with a PKI of its own.
		secret.Data = nil
	}
	rotation := pendingRotation(kd)
	hadCerts := len(secret.Data) > 0
	req := pkiRequest(kd)
	req.Reissue = rotation != "" && hadCerts
	bundle, certs, changed, err := pki.Ensure(pki.Bundle(secret.Data), req, now)
	var broken *pki.TrustRootError
	if errors.As(err, &broken) {
		setCondition(kd, kaov1.CertificatesValidCondition, metav1.ConditionFalse, kaov1.TrustRootUnusableReason, err.Error())
	}
	if err != nil {
		return nil, reason.Missing("issuing certificates from Secret %s: %v", key, err)
	}
	if len(changed) > 0 || !exists || stale {
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
		sort.Strings(changed)
		r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "CertificatesIssued", "Issue",
			"Issued %s", truncateString(strings.Join(changed, ", "), 900))
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
		renewal.LastRenewalTime = timePtr(now)
	}
	renewal.NextRenewalTime = nextRenewal(certs, renewBeforeOf(kd), now)
	if renewal.NextRenewalTime == nil && len(certs) > 0 {
		ctrl.LoggerFrom(ctx).Info("No certificate renewal is scheduled: what is due now could not be renewed", "certificates", len(certs))
	}
	kd.Status.CertificateRenewal = renewal
	return bundle, nil
}

// renewedLeaves tells whether changed (as from pki.Ensure) names a leaf
// certificate: anything but the CAs and the service-account key.
func renewedLeaves(changed []string) bool {
	for _, name := range changed {
		switch name {
		case pki.CA, pki.FrontProxyCA, pki.EtcdCA, pki.ServiceAccount:
		default:
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
			Name: c.Name, SecretName: secret, NotBefore: timePtr(c.NotBefore), NotAfter: metav1.NewTime(c.NotAfter),
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
