package karmadadeployment

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/probe"
)

// defaultProbeInterval is how often an installed control plane is probed:
// often enough that a dead etcd member shows in status within a minute.
const defaultProbeInterval = 30 * time.Second

// observe sets the health conditions from probes of the installed control
// plane (on the probe controller's workers: health.go), lists the components in status and exports the admin kubeconfig.
// Every component is probed from the operator's side: API servers answer
// /readyz, karmada-webhook completes a TLS handshake with a certificate kao's
// CA signed for its host, the Cluster APIService is Available, and each
// controller's leader lease in karmada-apiserver is renewed.
func (r *Reconciler) observe(ctx context.Context, kd *kaov1.KarmadaDeployment) {
	setProbeConditions(kd)
	if kd.Status.ObservedGeneration == 0 {
		return
	}
	if kd.Spec.Mode == kaov1.ContainerizedMode {
		r.observeContainerized(ctx, kd)
		return
	}
	bundle, err := r.inputs().ReadPKI(ctx, kd)
	if err != nil {
		msg := "cannot probe the control plane: " + err.Error()
		setCondition(kd, kaov1.ControlPlaneReadyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason, msg)
		setCondition(kd, kaov1.ReadyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason, msg)
		return
	}
	versions, _ := r.inputs().ObservedArtifacts(kd) // for the target versions shown in status; nil if the bundle went away
	components := []kaov1.ComponentStatus{}
	switch {
	case kd.Spec.Etcd.Managed != nil:
		components = append(components, r.observeEtcd(ctx, kd, bundle))
	case kd.Spec.Etcd.External != nil:
		r.observeExternalEtcd(ctx, kd)
	}
	cp, down, api, err := r.observeControlPlane(ctx, kd, bundle)
	r.observeMemberClusters(ctx, kd, api)
	if err != nil {
		msg := "cannot probe the control plane: " + err.Error()
		setCondition(kd, kaov1.ControlPlaneReadyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason, msg)
		setCondition(kd, kaov1.ReadyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason, msg)
	} else {
		components = append(components, cp...)
		setControlPlaneReady(kd, cp, down)
		setReadyCondition(kd)
	}
	// Versions come from runs (what each host's process reports) and from
	// the API servers' /version; the probes above only saw the hosts.
	carryVersions(kd.Status.Components, components)
	kd.Status.Components = components
	summarizeVersions(kd, targetVersions(kd, versions))
	kd.Status.Endpoint = pipeline.APIEndpoint(kd)
	if err := r.exportKubeconfig(ctx, kd, bundle); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Exporting the admin kubeconfig")
	}
}

// withoutInstance says, for each control-plane component, what stops while
// no instance of it runs anywhere: what an SRE must know when the only host
// of a role is gone, until another host runs it.
var withoutInstance = map[string]string{
	"karmada-apiserver":            "Karmada's API does not answer",
	"karmada-aggregated-apiserver": "the Cluster API (karmadactl get clusters, the clusters' proxy) does not answer",
	"karmada-webhook":              "Karmada refuses to create or change the objects its webhook checks (policies, bindings, Works, Clusters)",
	"karmada-controller-manager":   "nothing propagates to the members, and the members' health is not updated",
	"karmada-scheduler":            "new and changed workloads are not scheduled to members",
	"kube-controller-manager":      "Karmada's garbage collection, namespace deletion and service-account tokens stop",
}

// setControlPlaneReady sets ControlPlaneReady from the components' probes.
// down names the components no instance of which answered: then the reason
// is ComponentsUnavailable, and the message says first what stops until a
// host runs them again.
func setControlPlaneReady(kd *kaov1.KarmadaDeployment, cp []kaov1.ComponentStatus, down map[string]bool) {
	bad, gone, stops := []string{}, []string{}, []string{}
	for _, c := range cp {
		if c.Ready {
			continue
		}
		bad = append(bad, c.Name+": "+c.Message)
		if down[c.Name] {
			gone = append(gone, c.Name)
			if what := withoutInstance[c.Name]; what != "" {
				stops = append(stops, what)
			}
		}
	}
	if len(bad) == 0 {
		setCondition(kd, kaov1.ControlPlaneReadyCondition, metav1.ConditionTrue, kaov1.ComponentsHealthyReason,
			fmt.Sprintf("all %d components pass their health checks", len(cp)))
		return
	}
	detail := fmt.Sprintf("%d/%d components unhealthy: %s", len(bad), len(cp), strings.Join(bad, "; "))
	if len(gone) == 0 {
		setCondition(kd, kaov1.ControlPlaneReadyCondition, metav1.ConditionFalse, kaov1.ComponentsUnhealthyReason,
			pipeline.TruncateString(detail, 1024))
		return
	}
	msg := fmt.Sprintf("no instance of %s answers on any host: %s, until a host with their role runs them again. %s",
		strings.Join(gone, ", "), strings.Join(stops, "; "), detail)
	setCondition(kd, kaov1.ControlPlaneReadyCondition, metav1.ConditionFalse, kaov1.ComponentsUnavailableReason,
		pipeline.TruncateString(msg, 1024))
}

// setReadyCondition sums up the other conditions: the control plane and etcd
// pass their probes, the last run succeeded, and every member is Ready.
func setReadyCondition(kd *kaov1.KarmadaDeployment) {
	needs := []string{kaov1.ControlPlaneReadyCondition, kaov1.PlaybookSucceededCondition}
	needs = append(needs, kaov1.EtcdHealthyCondition)
	if len(kd.Spec.Members) > 0 {
		needs = append(needs, kaov1.MembersReadyCondition)
	}
	bad := []string{}
	for _, t := range needs {
		c := meta.FindStatusCondition(kd.Status.Conditions, t)
		switch {
		case c == nil:
			bad = append(bad, t+" is not reported yet")
		case c.Status != metav1.ConditionTrue:
			bad = append(bad, fmt.Sprintf("%s is %s (%s)", t, c.Status, c.Reason))
		}
	}
	if len(bad) == 0 {
		setCondition(kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason,
			"the control plane passes its health checks and the last run succeeded")
		return
	}
	setCondition(kd, kaov1.ReadyCondition, metav1.ConditionFalse, kaov1.ProbeFailedReason,
		pipeline.TruncateString(strings.Join(bad, "; "), 1024))
}

// observeControlPlane probes every Karmada component except etcd. It fails
// only when kao's PKI cannot make a probe client.
func (r *Reconciler) observeControlPlane(ctx context.Context, kd *kaov1.KarmadaDeployment, bundle pki.Bundle) ([]kaov1.ComponentStatus, map[string]bool, probe.API, error) {
	admin, err := pipeline.ClientTLS(bundle, "ca.crt", "admin-client")
	if err != nil {
		return nil, nil, probe.API{}, err
	}
	apiHosts := pipeline.HostsWithRole(kd, kaov1.APIServerRole)
	cpHosts := pipeline.HostsWithRole(kd, kaov1.ControlPlaneRole)
	port := int(kd.Spec.APIServer.SecurePort)
	if port == 0 {
		port = pipeline.DefaultSecurePort
	}

	apiserver := component("karmada-apiserver", apiHosts)
	eps := r.readyzProber().Readyz(ctx, hostURLs(apiHosts, port, "/readyz"), admin)
	summarize(&apiserver, eps)
	answered := r.versionProber().Versions(ctx, hostURLs(apiHosts, port, "/version"), admin)
	for _, h := range apiHosts {
		if v, ok := answered[h.Name]; ok {
			apiserver.Instances = append(apiserver.Instances, kaov1.ComponentInstance{Host: h.Name, Version: v})
		}
	}

	aggregated := component("karmada-aggregated-apiserver", apiHosts)
	aggregatedEps := r.readyzProber().Readyz(ctx, hostURLs(apiHosts, aggregatedAPIServerPort, "/readyz"), admin)
	summarize(&aggregated, aggregatedEps)

	webhook := component("karmada-webhook", cpHosts)
	addrs := map[string]string{}
	for _, h := range cpHosts {
		addrs[h.Name] = net.JoinHostPort(h.Address, strconv.Itoa(webhookPort))
	}
	caOnly := &tls.Config{RootCAs: admin.RootCAs, MinVersion: tls.VersionTLS12}
	webhookEps := r.karmadaProber().Handshake(ctx, addrs, caOnly)
	summarize(&webhook, webhookEps)

	controllers := []kaov1.ComponentStatus{
		component("kube-controller-manager", cpHosts),
		component("karmada-controller-manager", cpHosts),
		component("karmada-scheduler", cpHosts),
	}
	leases := []probe.LeaseRef{
		{Namespace: "kube-system", Name: "kube-controller-manager"},
		{Namespace: "karmada-system", Name: "karmada-controller-manager"},
		{Namespace: "karmada-system", Name: "karmada-scheduler"},
	}
	// down names the components no instance of which answered: an
	// instance that answers unready runs, and its own message says why it
	// is not ready. A controller whose lease was read and found expired is
	// one: a standby on a live host would have taken the lease over within
	// leaseGrace. A lease that could not be read tells nothing (without a
	// ready API server, the API server's own entry says what stops).
	down := map[string]bool{
		apiserver.Name:  !anyAnswered(eps),
		aggregated.Name: !anyAnswered(aggregatedEps),
		webhook.Name:    !anyAnswered(webhookEps),
	}
	// The cluster-wide facts come from any API server that is ready.
	api := probe.API{TLS: admin}
	for _, e := range eps {
		if e.Ready {
			api.URL = strings.TrimSuffix(e.URL, "/readyz")
			break
		}
	}
	if api.URL == "" {
		for i := range controllers {
			controllers[i].Message = "no karmada-apiserver is ready to read its leader lease from"
		}
		aggregated.Ready = false
	} else {
		for i, l := range r.karmadaProber().Leases(ctx, api, leases, r.Clock.Now()) {
			setLeaseStatus(&controllers[i], l)
			down[controllers[i].Name] = l.Read && !l.Held
		}
		if ok, msg := r.karmadaProber().APIService(ctx, api, clusterAPIService); !ok {
			aggregated.Ready = false
			aggregated.Message = pipeline.TruncateString(aggregated.Message+"; "+msg, 512)
		}
	}
	if api.URL != "" {
		err := routeAroundDeadHosts(ctx, api.URL, bundle, []hostSlice{
			{name: aggregatedAPIServerSlice, ready: endpointReadiness(apiHosts, aggregatedEps)},
			{name: webhookSlice, ready: endpointReadiness(cpHosts, webhookEps)},
		})
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Routing around hosts that failed their probes")
		}
	}
	out := append([]kaov1.ComponentStatus{apiserver, aggregated}, append(controllers, webhook)...)
	return append(out, r.observeAddons(ctx, kd, bundle, admin, api)...), down, api, nil
}

// anyAnswered tells whether any instance answered its probe, ready or not
// (an API server whose etcd lost its quorum answers, unready: it runs).
func anyAnswered(eps []probe.Endpoint) bool {
	for _, e := range eps {
		if e.Ready || e.Answered {
			return true
		}
	}
	return false
}

// observeMemberClusters reads Karmada's Cluster objects through a ready
// karmada-apiserver (api.URL empty: none is) into status.members: from the
// deployment's Cluster watch once that has listed them, else with a list of
// its own. The watch starts with the first ready API server, members or
// not, so that members a later spec adds show in status while their run
// joins them.
func (r *Reconciler) observeMemberClusters(ctx context.Context, kd *kaov1.KarmadaDeployment, api probe.API) {
	now := metav1.NewTime(r.Clock.Now())
	var watched []probe.ClusterState
	synced := false
	if api.URL != "" && r.clusterWatches != nil {
		watched, synced = r.clusterWatches.clusters(kd, api)
	}
	switch {
	case len(kd.Spec.Members) == 0 && len(kd.Status.Members) == 0:
		observeMembers(kd, nil, nil, now)
	case api.URL == "":
		observeMembers(kd, nil, errors.New("no karmada-apiserver is ready"), now)
	case synced:
		observeMembers(kd, watched, nil, now)
	default:
		clusters, err := r.karmadaProber().Clusters(ctx, api)
		observeMembers(kd, clusters, err, now)
	}
}

// Where the components the operator probes listen (the roles' defaults).
const (
	aggregatedAPIServerPort = 7443

	webhookPort = 8443

	clusterAPIService = "v1alpha1.cluster.karmada.io"
)

// component starts the status entry of a component running on some hosts.
// Its versions are filled in afterwards (carryVersions, summarizeVersions).
func component(name string, hosts []kaov1.Host) kaov1.ComponentStatus {
	c := kaov1.ComponentStatus{Name: name}
	for _, h := range hosts {
		c.Hosts = append(c.Hosts, h.Name)
	}
	return c
}

// version is a component's own version, else its family's.
func version(own, family string) string {
	if own != "" {
		return own
	}
	return family
}

// hostURLs maps host names to https://address:port<path>.
func hostURLs(hosts []kaov1.Host, port int, path string) map[string]string {
	urls := map[string]string{}
	for _, h := range hosts {
		urls[h.Name] = "https://" + net.JoinHostPort(h.Address, strconv.Itoa(port)) + path
	}
	return urls
}

// summarize sets a component ready when every instance answered, and says
// which did not.
func summarize(c *kaov1.ComponentStatus, eps []probe.Endpoint) {
	ready, problems := 0, []string{}
	for _, e := range eps {
		if e.Ready {
			ready++
		} else {
			problems = append(problems, e.Host+": "+e.Message)
		}
	}
	c.Ready = len(eps) > 0 && ready == len(eps)
	c.Message = pipeline.TruncateString(strings.TrimSpace(fmt.Sprintf("%d/%d ready %s", ready, len(eps), strings.Join(problems, "; "))), 512)
}

// observeEtcd probes every etcd member over TLS and records EtcdHealthy and status.etcd.
func (r *Reconciler) observeEtcd(ctx context.Context, kd *kaov1.KarmadaDeployment, bundle pki.Bundle) kaov1.ComponentStatus {
	comp := kaov1.ComponentStatus{Name: "etcd"}
	tlsConfig, err := pipeline.ClientTLS(bundle, "etcd-ca.crt", "etcd-healthcheck-client")
	if err != nil {
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason, "cannot probe etcd: "+err.Error())
		comp.Message = err.Error()
		return comp
	}
	members := map[string]string{}
	for _, h := range pipeline.HostsWithRole(kd, kaov1.EtcdRole) {
		members[h.Name] = "https://" + net.JoinHostPort(h.Address, strconv.Itoa(pipeline.EtcdClientPort))
		comp.Hosts = append(comp.Hosts, h.Name)
	}
	health := r.etcdProber().Etcd(ctx, members, tlsConfig, nil)
	recordEtcdHealth(kd, health)
	comp.Ready = health.Healthy == len(health.Members)
	comp.Message = pipeline.TruncateString(strings.TrimSpace(health.Summary()+" healthy "+health.Problems()), 512)
	return comp
}

// observeExternalEtcd probes an etcd cluster kao does not manage with the
// client certificate the API servers use, and records EtcdHealthy and
// status.etcd. External etcd is not a component kao runs, so it is not
// listed in status.components.
func (r *Reconciler) observeExternalEtcd(ctx context.Context, kd *kaov1.KarmadaDeployment) {
	ext, err := r.inputs().ReadExternalEtcd(ctx, kd)
	var tlsConfig *tls.Config
	if err == nil {
		tlsConfig, err = ext.TLSConfig()
	}
	if err != nil {
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason,
			pipeline.TruncateString("cannot probe the external etcd: "+err.Error(), 1024))
		return
	}
	recordEtcdHealth(kd, r.etcdProber().Etcd(ctx, ext.Endpoint, tlsConfig, nil))
}

func (r *Reconciler) etcdProber() probe.EtcdProber {
	if r.EtcdProber != nil {
		return r.EtcdProber
	}
	return probe.Etcd{}
}

func (r *Reconciler) readyzProber() probe.ReadyzProber {
	if r.ReadyzProber != nil {
		return r.ReadyzProber
	}
	return probe.Readyz{}
}

func (r *Reconciler) versionProber() probe.VersionProber {
	if r.VersionProber != nil {
		return r.VersionProber
	}
	return probe.APIVersions{}
}

func (r *Reconciler) karmadaProber() probe.KarmadaProber {
	if r.KarmadaProber != nil {
		return r.KarmadaProber
	}
	return probe.Karmada{}
}

func (r *Reconciler) probeInterval() time.Duration {
	if r.ProbeInterval > 0 {
		return r.ProbeInterval
	}
	return defaultProbeInterval
}

// recordEtcdHealth writes status.etcd and the EtcdHealthy condition.
func recordEtcdHealth(kd *kaov1.KarmadaDeployment, h probe.EtcdHealth) {
	st := &kaov1.EtcdStatus{Healthy: h.Summary(), Leader: h.Leader}
	for _, m := range h.Members {
		ms := kaov1.EtcdMemberStatus{
			Name: m.Name, ID: m.ID, ClientURL: m.Endpoint, Healthy: m.Healthy, Leader: m.Leader, Learner: m.Learner,
			Message: pipeline.TruncateString(m.Message, 512),
		}
		if m.DBSize > 0 { // only a member that answered reports its database
			ms.DBSizeBytes = ptr.To(m.DBSize)
		}
		st.Members = append(st.Members, ms)
	}
	kd.Status.Etcd = st
	switch {
	case h.Healthy == len(h.Members) && h.Leader != "":
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionTrue, kaov1.EtcdMembersHealthyReason,
			fmt.Sprintf("%s members healthy; leader %s", h.Summary(), h.Leader))
	case h.HasQuorum():
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionFalse, kaov1.EtcdMembersUnhealthyReason,
			pipeline.TruncateString(fmt.Sprintf("%s members healthy, quorum holds: %s", h.Summary(), h.Problems()), 1024))
	case h.AllStopped():
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionFalse, kaov1.EtcdAllMembersStoppedReason,
			pipeline.TruncateString(fmt.Sprintf("%s members healthy: etcd runs on none of its hosts, which are up "+
				"(each refuses the connection); a run starts it: %s", h.Summary(), h.Problems()), 1024))
	default:
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionFalse, kaov1.EtcdQuorumLostReason,
			pipeline.TruncateString(fmt.Sprintf("%s members healthy, quorum lost: %s", h.Summary(), h.Problems()), 1024))
	}
}

// setLeaseStatus sets a leader-elected component's readiness from its lease:
// ready while a holder renews it.
func setLeaseStatus(c *kaov1.ComponentStatus, l probe.LeaseState) {
	c.Ready, c.Message = l.Held, "leader "+l.Holder
	if !l.Held {
		c.Message = pipeline.TruncateString(fmt.Sprintf("lease %s/%s: %s", l.Namespace, l.Name, l.Message), 512)
	}
}
