package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/probe"
)

// defaultProbeInterval is how often an installed control plane is probed:
// often enough that a dead etcd member shows in status within a minute.
const defaultProbeInterval = 30 * time.Second

// etcdClientPort is the port managed etcd members serve clients on.
const etcdClientPort = 2379

// observe sets the health conditions from probes of the installed control
// plane, lists the components in status and exports the admin kubeconfig.
// What kao cannot probe yet stays Unknown and says so.
func (r *KarmadaDeploymentReconciler) observe(ctx context.Context, kd *kaov1.KarmadaDeployment) time.Duration {
	setProbeConditions(kd)
	if kd.Spec.Mode != kaov1.BinaryMode || kd.Status.ObservedGeneration == 0 {
		return 0
	}
	bundle, err := r.readPKI(ctx, kd)
	if err != nil {
		setCondition(kd, kaov1.ControlPlaneReadyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason,
			"cannot probe the control plane: "+err.Error())
		return r.probeInterval()
	}
	versions, _ := r.resolveArtifacts(kd) // for the versions shown in status; nil if the bundle went away
	components := []kaov1.ComponentStatus{}
	if kd.Spec.Etcd.Managed != nil {
		components = append(components, r.observeEtcd(ctx, kd, bundle, versions))
	}
	apiserver, err := r.observeAPIServer(ctx, kd, bundle, versions)
	if err != nil {
		setCondition(kd, kaov1.ControlPlaneReadyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason,
			"cannot probe karmada-apiserver: "+err.Error())
	} else {
		components = append(components, apiserver)
		setCondition(kd, kaov1.ControlPlaneReadyCondition, metav1.ConditionUnknown, kaov1.NotImplementedReason,
			truncateString("kao installs and probes etcd and karmada-apiserver so far; karmada-apiserver: "+apiserver.Message, 1024))
	}
	kd.Status.Components = components
	kd.Status.Endpoint = apiEndpoint(kd)
	if err := r.exportKubeconfig(ctx, kd, bundle); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Exporting the admin kubeconfig")
	}
	return r.probeInterval()
}

// hostsWithRole lists the hosts that have a role, in spec order.
func hostsWithRole(kd *kaov1.KarmadaDeployment, role kaov1.HostRole) []kaov1.Host {
	out := []kaov1.Host{}
	for _, h := range kd.Spec.Hosts {
		for _, r := range h.Roles {
			if r == role {
				out = append(out, h)
			}
		}
	}
	return out
}

// observeEtcd probes every etcd member over TLS and records EtcdHealthy and status.etcd.
func (r *KarmadaDeploymentReconciler) observeEtcd(ctx context.Context, kd *kaov1.KarmadaDeployment, bundle pki.Bundle, versions *artifacts) kaov1.ComponentStatus {
	comp := kaov1.ComponentStatus{Name: "etcd"}
	if versions != nil {
		comp.Version = versions.etcd
	}
	tlsConfig, err := clientTLS(bundle, "etcd-ca.crt", "etcd-healthcheck-client")
	if err != nil {
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason, "cannot probe etcd: "+err.Error())
		comp.Message = err.Error()
		return comp
	}
	members := map[string]string{}
	for _, h := range hostsWithRole(kd, kaov1.EtcdRole) {
		members[h.Name] = "https://" + net.JoinHostPort(h.Address, strconv.Itoa(etcdClientPort))
		comp.Hosts = append(comp.Hosts, h.Name)
	}
	health := r.etcdProber().Etcd(ctx, members, tlsConfig)
	recordEtcdHealth(kd, health)
	comp.Ready = health.Healthy == len(health.Members)
	comp.Message = truncateString(strings.TrimSpace(health.Summary()+" healthy "+health.Problems()), 512)
	return comp
}

// observeAPIServer asks every karmada-apiserver for /readyz with the admin client certificate.
func (r *KarmadaDeploymentReconciler) observeAPIServer(ctx context.Context, kd *kaov1.KarmadaDeployment, bundle pki.Bundle, versions *artifacts) (kaov1.ComponentStatus, error) {
	comp := kaov1.ComponentStatus{Name: "karmada-apiserver"}
	if versions != nil {
		comp.Version = versions.kubernetes
	}
	tlsConfig, err := clientTLS(bundle, "ca.crt", "admin-client")
	if err != nil {
		return comp, err
	}
	port := int(kd.Spec.APIServer.SecurePort)
	if port == 0 {
		port = defaultSecurePort
	}
	urls := map[string]string{}
	for _, h := range hostsWithRole(kd, kaov1.APIServerRole) {
		urls[h.Name] = "https://" + net.JoinHostPort(h.Address, strconv.Itoa(port)) + "/readyz"
		comp.Hosts = append(comp.Hosts, h.Name)
	}
	eps := r.readyzProber().Readyz(ctx, urls, tlsConfig)
	ready, problems := 0, []string{}
	for _, e := range eps {
		if e.Ready {
			ready++
		} else {
			problems = append(problems, e.Host+": "+e.Message)
		}
	}
	comp.Ready = ready == len(eps)
	comp.Message = truncateString(strings.TrimSpace(fmt.Sprintf("%d/%d ready %s", ready, len(eps), strings.Join(problems, "; "))), 512)
	return comp, nil
}

func (r *KarmadaDeploymentReconciler) etcdProber() probe.EtcdProber {
	if r.EtcdProber != nil {
		return r.EtcdProber
	}
	return probe.Etcd{}
}

func (r *KarmadaDeploymentReconciler) readyzProber() probe.ReadyzProber {
	if r.ReadyzProber != nil {
		return r.ReadyzProber
	}
	return probe.Readyz{}
}

func (r *KarmadaDeploymentReconciler) probeInterval() time.Duration {
	if r.ProbeInterval > 0 {
		return r.ProbeInterval
	}
	return defaultProbeInterval
}

// recordEtcdHealth writes status.etcd and the EtcdHealthy condition.
func recordEtcdHealth(kd *kaov1.KarmadaDeployment, h probe.EtcdHealth) {
	st := &kaov1.EtcdStatus{Healthy: h.Summary(), Leader: h.Leader}
	for _, m := range h.Members {
		st.Members = append(st.Members, kaov1.EtcdMemberStatus{
			Name: m.Name, ID: m.ID, ClientURL: m.Endpoint, Healthy: m.Healthy, Leader: m.Leader,
			Message: truncateString(m.Message, 512),
		})
	}
	kd.Status.Etcd = st
	switch {
	case h.Healthy == len(h.Members) && h.Leader != "":
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionTrue, kaov1.EtcdMembersHealthyReason,
			fmt.Sprintf("%s members healthy; leader %s", h.Summary(), h.Leader))
	case h.HasQuorum():
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionFalse, kaov1.EtcdMembersUnhealthyReason,
			truncateString(fmt.Sprintf("%s members healthy, quorum holds: %s", h.Summary(), h.Problems()), 1024))
	default:
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionFalse, kaov1.EtcdQuorumLostReason,
			truncateString(fmt.Sprintf("%s members healthy, quorum lost: %s", h.Summary(), h.Problems()), 1024))
	}
}

// clientTLS builds the TLS settings of a probe client from the PKI bundle:
// the CA that signed the servers and a client certificate pair.
func clientTLS(bundle pki.Bundle, caFile, client string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle[caFile]) {
		return nil, fmt.Errorf("the PKI Secret has no %s", caFile)
	}
	cert, err := tls.X509KeyPair(bundle[client+".crt"], bundle[client+".key"])
	if err != nil {
		return nil, fmt.Errorf("the PKI Secret's %s pair is unusable: %w", client, err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
