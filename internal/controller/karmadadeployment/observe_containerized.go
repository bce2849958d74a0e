package karmadadeployment

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/inventory"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/probe"
)

// containerizedComponents are the Deployments of a Containerized control
// plane in the order status lists them (after etcd).
var containerizedComponents = []string{
	pipeline.HostAPIServer, pipeline.HostAggregatedAPIServer, hostKubeControllerManager, hostControllerManager, hostScheduler, pipeline.HostWebhook,
}

// observeContainerized sets the health conditions of a Containerized control
// plane. Each component's readiness comes from its workload in the host
// cluster (every replica updated and Ready); karmada-apiserver must also
// answer /readyz at the endpoint, and karmada-aggregated-apiserver's Cluster
// APIService must be Available, when kao reaches karmada-apiserver. etcd's
// health comes from etcd itself when the operator runs in the host cluster,
// else from its pods and from karmada-apiserver's etcd check.
func (r *Reconciler) observeContainerized(ctx context.Context, kd *kaov1.KarmadaDeployment) {
	unknown := func(msg string) {
		msg = pipeline.TruncateString("cannot probe the control plane: "+msg, 1024)
		for _, t := range []string{kaov1.ControlPlaneReadyCondition, kaov1.EtcdHealthyCondition, kaov1.ReadyCondition} {
			setCondition(kd, t, metav1.ConditionUnknown, kaov1.ProbeFailedReason, msg)
		}
	}
	bundle, err := r.inputs().ReadPKI(ctx, kd)
	if err != nil {
		unknown(err.Error())
		return
	}
	hc, err := r.inputs().HostCluster(ctx, kd)
	if err != nil {
		unknown(err.Error())
		return
	}
	admin, err := pipeline.ClientTLS(bundle, "ca.crt", "admin-client")
	if err != nil {
		unknown(err.Error())
		return
	}

	// karmada-apiserver at the endpoint clients use.
	api := probe.API{TLS: admin}
	endpoint := pipeline.APIEndpoint(kd)
	apiProblem := "no endpoint is known yet"
	if endpoint != "" {
		url := "https://" + endpoint
		eps := r.readyzProber().Readyz(ctx, map[string]string{pipeline.HostAPIServer: url + "/readyz"}, admin)
		if len(eps) == 1 && eps[0].Ready {
			api.URL, apiProblem = url, ""
		} else if len(eps) == 1 {
			apiProblem = url + "/readyz: " + eps[0].Message
		}
	}

	components := []kaov1.ComponentStatus{}
	switch {
	case kd.Spec.Etcd.Managed != nil:
		components = append(components, r.observeContainerizedEtcd(ctx, kd, hc, bundle, api))
	case kd.Spec.Etcd.External != nil:
		r.observeExternalEtcd(ctx, kd)
	}
	cp := make([]kaov1.ComponentStatus, 0, len(containerizedComponents))
	for _, name := range containerizedComponents {
		c := deploymentComponent(ctx, kd, hc, name)
		switch {
		case name == pipeline.HostAPIServer && c.Ready && apiProblem != "":
			c.Ready, c.Message = false, pipeline.TruncateString(c.Message+"; "+apiProblem, 512)
		case name == pipeline.HostAggregatedAPIServer && c.Ready && api.URL == "":
			c.Ready, c.Message = false, pipeline.TruncateString(c.Message+"; the Cluster APIService cannot be read: karmada-apiserver does not answer", 512)
		case name == pipeline.HostAggregatedAPIServer && c.Ready:
			if ok, msg := r.karmadaProber().APIService(ctx, api, clusterAPIService); !ok {
				c.Ready, c.Message = false, pipeline.TruncateString(c.Message+"; "+msg, 512)
			}
		}
		cp = append(cp, c)
	}
	cp = append(cp, r.observeContainerizedAddons(ctx, kd, hc, bundle, api)...)
	r.observeMemberClusters(ctx, kd, api)
	setControlPlaneReady(kd, cp, nil) // the host cluster reschedules what is missing
	setReadyCondition(kd)
	kd.Status.Components = append(components, cp...)
	kd.Status.Endpoint = endpoint
	if err := r.exportKubeconfig(ctx, kd, bundle); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Exporting the admin kubeconfig")
	}
}

// deploymentComponent is the status of the component a Deployment of the
// host cluster runs: ready once its rollout is complete with every replica
// Ready, at the version its image names.
func deploymentComponent(ctx context.Context, kd *kaov1.KarmadaDeployment, hc *pipeline.HostCluster, name string) kaov1.ComponentStatus {
	c := kaov1.ComponentStatus{Name: name}
	d, err := hc.Client.AppsV1().Deployments(hc.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		c.Message = fmt.Sprintf("Deployment %s/%s does not exist", hc.Namespace, name)
	case err != nil:
		c.Message = pipeline.TruncateString(fmt.Sprintf("reading Deployment %s/%s: %v", hc.Namespace, name, err), 512)
	default:
		c.Ready, c.Message = deploymentState(d)
		c.Version, c.TargetVersion = rolloutVersions(kd, name, podImage(d.Spec.Template.Spec), c.Ready)
	}
	return c
}

// observeContainerizedAddons reports every addon spec.addons enables from
// its Deployments in the host cluster (every replica updated and Ready),
// and, through karmada-apiserver, what the addon must have there:
// karmada-search's and karmada-metrics-adapter's APIService Available,
// karmada-descheduler's renewed leader lease. The estimators of all members
// share one entry, ready when each member's is; with the operator inside the
// host cluster, each must also complete a mutual-TLS handshake at its
// Service's name, as karmada-scheduler dials it.
func (r *Reconciler) observeContainerizedAddons(ctx context.Context, kd *kaov1.KarmadaDeployment, hc *pipeline.HostCluster,
	bundle pki.Bundle, api probe.API) []kaov1.ComponentStatus {
	a := kd.Spec.Addons
	out := []kaov1.ComponentStatus{}
	notReady := func(c *kaov1.ComponentStatus, why string) {
		c.Ready, c.Message = false, pipeline.TruncateString(c.Message+"; "+why, 512)
	}

	for _, s := range []struct {
		name, apiService string
		spec             *kaov1.AddonSpec
	}{
		{pipeline.HostSearch, searchAPIService, a.Search},
		{pipeline.HostMetricsAdapter, metricsAPIService, a.MetricsAdapter},
		{hostDescheduler, "", a.Descheduler},
	} {
		if !pipeline.AddonEnabled(s.spec) {
			continue
		}
		c := deploymentComponent(ctx, kd, hc, s.name)
		switch {
		case !c.Ready:
		case api.URL == "" && s.apiService != "":
			notReady(&c, "its APIService cannot be read: karmada-apiserver does not answer")
		case api.URL == "":
			notReady(&c, "its leader lease cannot be read: karmada-apiserver does not answer")
		case s.apiService != "":
			if ok, msg := r.karmadaProber().APIService(ctx, api, s.apiService); !ok {
				notReady(&c, msg)
			}
		default:
			lease := probe.LeaseRef{Namespace: karmadaSystemNamespace, Name: deschedulerLeaseName}
			held := c
			setLeaseStatus(&held, r.karmadaProber().Leases(ctx, api, []probe.LeaseRef{lease}, r.Clock.Now())[0])
			if !held.Ready {
				notReady(&c, held.Message)
			} else {
				c.Message += "; " + held.Message
			}
		}
		out = append(out, c)
	}

	if pipeline.AddonEnabled(a.SchedulerEstimator) {
		c := kaov1.ComponentStatus{Name: pipeline.EstimatorComponentPfx, Ready: true}
		names := []string{}
		for _, m := range kd.Spec.Members {
			names = append(names, m.Name)
		}
		slices.Sort(names)
		problems := []string{}
		dial := map[string]string{}
		for _, m := range names {
			e := deploymentComponent(ctx, kd, hc, pipeline.EstimatorComponentPfx+"-"+m)
			switch {
			case !e.Ready:
				problems = append(problems, m+": "+e.Message)
			case hc.InCluster:
				dial[m] = net.JoinHostPort(pipeline.ServiceNames(kd, e.Name)[1], strconv.Itoa(hostEstimatorPort))
			}
			if c.Version == "" || (e.Version != "" && olderThan(e.Version, c.Version)) {
				c.Version, c.TargetVersion = e.Version, e.TargetVersion
			}
		}
		if len(dial) > 0 {
			cfg, err := pipeline.ClientTLS(bundle, pki.CertFile(pki.CA), pki.EstimatorClient)
			if err != nil {
				problems = append(problems, err.Error())
			} else {
				for _, e := range r.karmadaProber().Handshake(ctx, dial, cfg) {
					if !e.Ready {
						problems = append(problems, e.Host+": "+e.URL+": "+e.Message)
					}
				}
			}
		}
		switch {
		case len(names) == 0:
			c.Message = "no member clusters, no estimators"
		case len(problems) > 0:
			c.Ready = false
			c.Message = pipeline.TruncateString(fmt.Sprintf("%d/%d estimators ready; %s", len(names)-min(len(problems), len(names)), len(names),
				strings.Join(problems, "; ")), 512)
		default:
			c.Message = fmt.Sprintf("%d/%d estimators ready", len(names), len(names))
		}
		out = append(out, c)
	}
	return out
}

// observeContainerizedEtcd reports the etcd StatefulSet as a component and
// sets EtcdHealthy and status.etcd. With the operator inside the host
// cluster, every member is asked over TLS (health, leader), as in Binary
// mode. From outside, etcd's Services are out of reach: each member's health
// is its pod's readiness, and, when karmada-apiserver answers, its etcd
// check (/readyz/etcd) must pass too.
func (r *Reconciler) observeContainerizedEtcd(ctx context.Context, kd *kaov1.KarmadaDeployment, hc *pipeline.HostCluster, bundle map[string][]byte, api probe.API) kaov1.ComponentStatus {
	comp := kaov1.ComponentStatus{Name: "etcd"}
	sts, err := hc.Client.AppsV1().StatefulSets(hc.Namespace).Get(ctx, pipeline.HostEtcd, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		comp.Message = fmt.Sprintf("StatefulSet %s/%s does not exist", hc.Namespace, pipeline.HostEtcd)
	case err != nil:
		comp.Message = pipeline.TruncateString(fmt.Sprintf("reading StatefulSet %s/%s: %v", hc.Namespace, pipeline.HostEtcd, err), 512)
	default:
		comp.Ready, comp.Message = statefulSetState(sts)
		comp.Version, comp.TargetVersion = rolloutVersions(kd, "etcd", podImage(sts.Spec.Template.Spec), comp.Ready)
	}

	if hc.InCluster {
		tlsConfig, err := pipeline.ClientTLS(bundle, "etcd-ca.crt", "etcd-healthcheck-client")
		if err != nil {
			setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason, "cannot probe etcd: "+err.Error())
			return comp
		}
		members := map[string]string{}
		for _, pod := range inventory.EtcdPodNames(kd) {
			members[pod] = pipeline.EtcdMemberURL(kd, pod)
		}
		health := r.etcdProber().Etcd(ctx, members, tlsConfig, nil)
		recordEtcdHealth(kd, health)
		if comp.Ready && health.Healthy != len(health.Members) {
			comp.Ready = false
			comp.Message = pipeline.TruncateString(comp.Message+"; "+health.Summary()+" healthy "+health.Problems(), 512)
		}
		return comp
	}

	selector := labels.SelectorFromSet(map[string]string{componentLabel: pipeline.HostEtcd, kaov1.DeploymentUIDLabel: string(kd.UID)})
	pods, err := hc.Client.CoreV1().Pods(hc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason,
			pipeline.TruncateString(fmt.Sprintf("cannot list etcd's pods in %s: %v", hc.Namespace, err), 1024))
		return comp
	}
	ready := map[string]bool{}
	for _, p := range pods.Items {
		ready[p.Name] = podReady(&p)
	}
	apiCheck := ""
	if api.URL != "" {
		eps := r.readyzProber().Readyz(ctx, map[string]string{pipeline.HostAPIServer: api.URL + "/readyz/etcd"}, api.TLS)
		if len(eps) == 1 && !eps[0].Ready {
			apiCheck = "karmada-apiserver's etcd check fails: " + eps[0].Message
		}
	}
	recordEtcdPodHealth(kd, inventory.EtcdPodNames(kd), ready, api.URL != "", apiCheck)
	return comp
}

// recordEtcdPodHealth writes status.etcd and EtcdHealthy from the members'
// pods, for an etcd the operator cannot reach: a member counts healthy when
// its pod is Ready, and no leader is known. apiChecked says karmada-apiserver
// answered its etcd check; apiProblem is its failure, if any.
func recordEtcdPodHealth(kd *kaov1.KarmadaDeployment, members []string, ready map[string]bool, apiChecked bool, apiProblem string) {
	st := &kaov1.EtcdStatus{}
	healthy, problems := 0, []string{}
	for _, m := range members {
		ms := kaov1.EtcdMemberStatus{Name: m, ClientURL: pipeline.EtcdMemberURL(kd, m), Healthy: ready[m]}
		switch r, found := ready[m]; {
		case !found:
			ms.Message = "its pod does not exist"
		case !r:
			ms.Message = "its pod is not Ready"
		default:
			healthy++
		}
		if ms.Message != "" {
			problems = append(problems, m+": "+ms.Message)
		}
		st.Members = append(st.Members, ms)
	}
	st.Healthy = fmt.Sprintf("%d/%d", healthy, len(members))
	kd.Status.Etcd = st
	source := "from the pods' readiness (etcd is not reachable from outside the host cluster)"
	if apiChecked && apiProblem == "" {
		source += "; karmada-apiserver reaches etcd"
	}
	if apiProblem != "" {
		problems = append(problems, apiProblem)
	}
	switch {
	case healthy == len(members) && apiProblem == "":
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionTrue, kaov1.EtcdMembersHealthyReason,
			fmt.Sprintf("%s members healthy %s", st.Healthy, source))
	case healthy > len(members)/2:
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionFalse, kaov1.EtcdMembersUnhealthyReason,
			pipeline.TruncateString(fmt.Sprintf("%s members healthy, quorum holds: %s", st.Healthy, strings.Join(problems, "; ")), 1024))
	default:
		setCondition(kd, kaov1.EtcdHealthyCondition, metav1.ConditionFalse, kaov1.EtcdQuorumLostReason,
			pipeline.TruncateString(fmt.Sprintf("%s members healthy, quorum lost: %s", st.Healthy, strings.Join(problems, "; ")), 1024))
	}
}

// deploymentState says whether a Deployment's rollout is complete with every
// replica Ready, and describes it.
func deploymentState(d *appsv1.Deployment) (bool, string) {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	switch {
	case s.ObservedGeneration < d.Generation:
		return false, fmt.Sprintf("the Deployment controller has not seen generation %d yet", d.Generation)
	case s.UpdatedReplicas < want:
		return false, fmt.Sprintf("rolling out: %d/%d replicas updated, %d ready", s.UpdatedReplicas, want, s.ReadyReplicas)
	case s.Replicas > s.UpdatedReplicas:
		return false, fmt.Sprintf("rolling out: %d old replicas still run", s.Replicas-s.UpdatedReplicas)
	case s.ReadyReplicas < want || s.AvailableReplicas < want:
		return false, fmt.Sprintf("%d/%d replicas ready", s.ReadyReplicas, want)
	}
	return true, fmt.Sprintf("%d/%d replicas ready", s.ReadyReplicas, want)
}

// statefulSetState is deploymentState for a StatefulSet.
func statefulSetState(sts *appsv1.StatefulSet) (bool, string) {
	want := int32(1)
	if sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	s := sts.Status
	switch {
	case s.ObservedGeneration < sts.Generation:
		return false, fmt.Sprintf("the StatefulSet controller has not seen generation %d yet", sts.Generation)
	case s.UpdatedReplicas < want || (s.UpdateRevision != "" && s.CurrentRevision != s.UpdateRevision):
		return false, fmt.Sprintf("rolling out: %d/%d replicas updated, %d ready", s.UpdatedReplicas, want, s.ReadyReplicas)
	case s.ReadyReplicas < want:
		return false, fmt.Sprintf("%d/%d replicas ready", s.ReadyReplicas, want)
	}
	return true, fmt.Sprintf("%d/%d replicas ready", s.ReadyReplicas, want)
}

// podReady tells whether a pod's Ready condition is true.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podImage is the image of a pod template's first container.
func podImage(spec corev1.PodSpec) string {
	if len(spec.Containers) == 0 {
		return ""
	}
	return spec.Containers[0].Image
}

// registryTag is an etcd image tag as registry.k8s.io writes it: 3.6.6-0.
var registryTag = regexp.MustCompile(`^([0-9]+\.[0-9]+\.[0-9]+)-[0-9]+$`)

// imageVersion is the version an image's tag names: the tag itself, or
// v<x.y.z> for registry.k8s.io's etcd tags. Empty without a tag.
func imageVersion(image string) string {
	image, _, _ = strings.Cut(image, "@")
	slash := strings.LastIndex(image, "/")
	colon := strings.LastIndex(image, ":")
	if colon <= slash {
		return ""
	}
	tag := image[colon+1:]
	if m := registryTag.FindStringSubmatch(tag); m != nil {
		return "v" + m[1]
	}
	return tag
}

// rolloutVersions are a component's version and target version for status:
// once the rollout is complete, the template's version; during it, the
// version status last reported, with the template's as the target.
func rolloutVersions(kd *kaov1.KarmadaDeployment, name, image string, complete bool) (string, string) {
	want := imageVersion(image)
	if complete {
		return want, ""
	}
	for _, c := range kd.Status.Components {
		if c.Name == name && c.Version != "" && c.Version != want {
			return c.Version, want
		}
	}
	return want, ""
}
