package controllers

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/probe"
)

// defaultProbeInterval is how often an installed control plane is probed:
// often enough that a dead etcd member shows in status within a minute.
const defaultProbeInterval = 30 * time.Second

// etcdClientPort is the port managed etcd members serve clients on.
const etcdClientPort = 2379

// observe sets the health conditions from probes of the installed control
// plane. What kao cannot probe yet stays Unknown and says so.
func (r *KarmadaDeploymentReconciler) observe(ctx context.Context, kd *kaov1.KarmadaDeployment) time.Duration {
	setProbeConditions(kd)
	if kd.Spec.Mode != kaov1.BinaryMode || kd.Spec.Etcd.Managed == nil || kd.Status.ObservedGeneration == 0 {
		return 0
	}
	bundle, err := r.readPKI(ctx, kd)
	if err != nil {
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason,
			"cannot probe etcd: "+err.Error())
		return r.probeInterval()
	}
	tlsConfig, err := etcdClientTLS(bundle)
	if err != nil {
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason,
			"cannot probe etcd: "+err.Error())
		return r.probeInterval()
	}
	members := map[string]string{}
	for _, h := range kd.Spec.Hosts {
		for _, role := range h.Roles {
			if role == kaov1.EtcdRole {
				members[h.Name] = "https://" + net.JoinHostPort(h.Address, strconv.Itoa(etcdClientPort))
			}
		}
	}
	health := r.etcdProber().Etcd(ctx, members, tlsConfig)
	recordEtcdHealth(kd, health)
	return r.probeInterval()
}

func (r *KarmadaDeploymentReconciler) probeInterval() time.Duration {
	if r.ProbeInterval > 0 {
		return r.ProbeInterval
	}
	return defaultProbeInterval
}

func (r *KarmadaDeploymentReconciler) etcdProber() probe.EtcdProber {
	if r.EtcdProber != nil {
		return r.EtcdProber
	}
	return probe.Etcd{}
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

// etcdClientTLS builds the TLS settings of the health-check client from the PKI bundle.
func etcdClientTLS(bundle map[string][]byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle["etcd-ca.crt"]) {
		return nil, errors.New("the PKI Secret has no etcd-ca.crt")
	}
	cert, err := tls.X509KeyPair(bundle["etcd-healthcheck-client.crt"], bundle["etcd-healthcheck-client.key"])
	if err != nil {
		return nil, fmt.Errorf("the PKI Secret's etcd-healthcheck-client pair is unusable: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
