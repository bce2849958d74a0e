package pipeline

import (
	"context"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/inventory"
	"github.com/kao-io/kao/internal/pki"
)

// Defaults of fields the API leaves optional.
const (
	DefaultSecurePort = 5443

	defaultServiceSubnet = "10.96.0.0/12"
)

// PKISecretName names the Secret holding a deployment's certificates and keys.
func PKISecretName(kd *kaov1.KarmadaDeployment) string {
	return TruncateString(kd.Name, 249) + "-pki"
}

// PKIRequest describes the certificates a deployment needs.
func PKIRequest(kd *kaov1.KarmadaDeployment) pki.Request {
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
			pki.APIServerServer:           ServiceNames(kd, HostAPIServer),
			pki.AggregatedAPIServerServer: ServiceNames(kd, HostAggregatedAPIServer),
			pki.WebhookServer:             ServiceNames(kd, HostWebhook),
			pki.SearchServer:              ServiceNames(kd, HostSearch),
			pki.MetricsAdapterServer:      ServiceNames(kd, HostMetricsAdapter),
		}
		// karmada-scheduler and karmada-descheduler dial each member's
		// estimator at its Service's name, and verify it.
		for _, m := range spec.Members {
			req.ServerSANs[pki.EstimatorServer] = append(req.ServerSANs[pki.EstimatorServer],
				ServiceNames(kd, EstimatorComponentPfx+"-"+m.Name)...)
		}
		if spec.Etcd.Managed != nil {
			clientNames := append(ServiceNames(kd, hostEtcdClient), hostEtcdClient)
			for _, pod := range inventory.EtcdPodNames(kd) {
				names := ServiceNames(kd, HostEtcd)
				req.EtcdHosts = append(req.EtcdHosts, pki.Host{
					Name: pod, Address: pod + "." + names[1],
					SANs: append([]string{pod + "." + names[0]}, clientNames...),
				})
			}
		}
	}
	req.Addons = pki.Addons{
		Search:             AddonEnabled(spec.Addons.Search),
		MetricsAdapter:     AddonEnabled(spec.Addons.MetricsAdapter),
		Descheduler:        AddonEnabled(spec.Addons.Descheduler),
		SchedulerEstimator: AddonEnabled(spec.Addons.SchedulerEstimator),
	}
	for _, m := range spec.Members {
		if m.SyncMode == kaov1.PullSyncMode {
			req.PullMembers = append(req.PullMembers, m.Name)
		}
	}
	req.Endpoint = APIEndpoint(kd)
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

// APIEndpoint is the host:port clients reach karmada-apiserver at: the spec's
// endpoint, else the first apiServer host (Binary) or the address the host
// cluster gave its Service (Containerized, resolved before each install run
// into status.endpoint).
func APIEndpoint(kd *kaov1.KarmadaDeployment) string {
	if kd.Spec.APIServer.Endpoint != "" {
		return kd.Spec.APIServer.Endpoint
	}
	if kd.Spec.Mode == kaov1.ContainerizedMode {
		return kd.Status.Endpoint
	}
	port := int(kd.Spec.APIServer.SecurePort)
	if port == 0 {
		port = DefaultSecurePort
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

// ReadPKI reads a deployment's certificate bundle.
func (g *Gatherer) ReadPKI(ctx context.Context, kd *kaov1.KarmadaDeployment) (pki.Bundle, error) {
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: kd.Namespace, Name: PKISecretName(kd)}
	if err := g.APIReader.Get(ctx, key, secret); err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if stale, err := OwnedByAnother(secret, kd); err != nil || stale {
		return nil, fmt.Errorf("the certificates' Secret %s is not this deployment's: it belongs to another KarmadaDeployment", key)
	}
	return pki.Bundle(secret.Data), nil
}
