package karmadadeployment

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/inventory"
)

const (
	hostKubeControllerManager = "kube-controller-manager"

	hostControllerManager = "karmada-controller-manager"

	hostScheduler = "karmada-scheduler"

	hostDescheduler = "karmada-descheduler"

	// hostEstimatorPort is the port of every estimator's Service
	// (karmada_workloads_estimator_port), which karmada-scheduler dials.
	hostEstimatorPort = 10352

	// Labels of the objects in the host cluster. Workloads are selected by
	// component and deployment UID, so that nothing else in the namespace is.
	componentLabel = "app.kubernetes.io/name"

	partOfLabel = "app.kubernetes.io/part-of"

	managedByLabel = "app.kubernetes.io/managed-by"
)

// fieldManager is the server-side apply field manager of kao's own writes to a
// host cluster (the role applies the workloads as "kao" too).
const fieldManager = "kao"

// hostClusterError describes a failed request to the host cluster for a
// condition: the Kubernetes status message, which names the object and the
// cause, or the connection error; never a credential.
func hostClusterError(what string, err error) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return reason.Failed(kaov1.HostClusterUnreachableReason, "%s", pipeline.TruncateString(fmt.Sprintf("%s in the host cluster: %s", what, status.Status().Message), 900))
	}
	return reason.Failed(kaov1.HostClusterUnreachableReason, "%s", pipeline.TruncateString(fmt.Sprintf("%s in the host cluster: %v", what, err), 900))
}

// exposeAPIServer makes sure karmada-apiserver's Service exists in the host
// cluster and returns the endpoint (host:port) clients reach it at. kao's Go
// side owns this one Service, not the role: its address must be known before
// a run, because karmada-apiserver's certificate names it and the run reaches
// karmada-apiserver there. spec.apiServer.endpoint wins when set; otherwise
// ClusterIP is the Service's DNS name, NodePort a node's address with the
// node port, and LoadBalancer the address the load balancer assigned (an
// ExposurePending *reason.Error until it has one).
func exposeAPIServer(ctx context.Context, kd *kaov1.KarmadaDeployment, hc *pipeline.HostCluster) (string, error) {
	if err := ensureHostNamespace(ctx, hc); err != nil {
		return "", err
	}
	svc, err := applyAPIServerService(ctx, kd, hc)
	if err != nil {
		return "", err
	}
	port := securePort(kd)
	if ep := kd.Spec.APIServer.Endpoint; ep != "" {
		return ep, nil
	}
	switch kd.Spec.APIServer.ServiceType {
	case kaov1.NodePortService:
		nodePort := int32(0)
		for _, p := range svc.Spec.Ports {
			nodePort = p.NodePort
		}
		if nodePort == 0 {
			return "", reason.Pending(kaov1.ExposurePendingReason, exposurePollInterval, "Service %s/%s has no node port yet", hc.Namespace, pipeline.HostAPIServer)
		}
		nodes, err := hc.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", hostClusterError("listing the nodes", err)
		}
		previous, _, _ := net.SplitHostPort(kd.Status.Endpoint)
		addr := pickNodeAddress(nodes.Items, previous)
		if addr == "" {
			return "", reason.Pending(kaov1.ExposurePendingReason, exposurePollInterval, "no node of the host cluster reports an address to reach the node port at")
		}
		return net.JoinHostPort(addr, strconv.Itoa(int(nodePort))), nil
	case kaov1.LoadBalancerService:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				return net.JoinHostPort(in.IP, strconv.Itoa(port)), nil
			}
			if in.Hostname != "" {
				return net.JoinHostPort(in.Hostname, strconv.Itoa(port)), nil
			}
		}
		return "", reason.Pending(kaov1.ExposurePendingReason, exposurePollInterval, "waiting for the host cluster's load balancer to give Service %s/%s an address", hc.Namespace, pipeline.HostAPIServer)
	default:
		return net.JoinHostPort(pipeline.ServiceNames(kd, pipeline.HostAPIServer)[1], strconv.Itoa(port)), nil
	}
}

// securePort is spec.apiServer.securePort with its default.
func securePort(kd *kaov1.KarmadaDeployment) int {
	if p := kd.Spec.APIServer.SecurePort; p != 0 {
		return int(p)
	}
	return pipeline.DefaultSecurePort
}

// ensureHostNamespace creates the host cluster namespace when it is missing.
// kao never deletes it: volumes kept after an uninstall live there, and the
// namespace may be someone else's.
func ensureHostNamespace(ctx context.Context, hc *pipeline.HostCluster) error {
	_, err := hc.Client.CoreV1().Namespaces().Get(ctx, hc.Namespace, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return hostClusterError("reading namespace "+hc.Namespace, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hc.Namespace}}
	if _, err := hc.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return hostClusterError("creating namespace "+hc.Namespace, err)
	}
	return nil
}

// workloadLabels are the labels of every object of a Containerized control
// plane in the host cluster.
func workloadLabels(kd *kaov1.KarmadaDeployment, component string) map[string]string {
	return map[string]string{
		componentLabel:           component,
		partOfLabel:              "karmada",
		managedByLabel:           "kao",
		kaov1.DeploymentUIDLabel: string(kd.UID),
	}
}

// applyAPIServerService applies karmada-apiserver's Service and returns it as
// the host cluster stored it. A Service of the same name that another
// deployment (or someone else) made is refused: one control plane per
// namespace.
func applyAPIServerService(ctx context.Context, kd *kaov1.KarmadaDeployment, hc *pipeline.HostCluster) (*corev1.Service, error) {
	services := hc.Client.CoreV1().Services(hc.Namespace)
	cur, err := services.Get(ctx, pipeline.HostAPIServer, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, hostClusterError("reading Service "+hc.Namespace+"/"+pipeline.HostAPIServer, err)
	case cur.Labels[kaov1.DeploymentUIDLabel] != string(kd.UID):
		owner := "was not made by kao"
		if uid := cur.Labels[kaov1.DeploymentUIDLabel]; uid != "" {
			owner = "belongs to another KarmadaDeployment (uid " + uid + ")"
		}
		return nil, reason.Missing("Service %s/%s in the host cluster %s: a namespace holds one control plane; choose another spec.hostCluster.namespace",
			hc.Namespace, pipeline.HostAPIServer, owner)
	}
	port := kd.Spec.APIServer.SecurePort
	if port == 0 {
		port = pipeline.DefaultSecurePort
	}
	typ := corev1.ServiceType(kd.Spec.APIServer.ServiceType)
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	selector := map[string]string{componentLabel: pipeline.HostAPIServer, kaov1.DeploymentUIDLabel: string(kd.UID)}
	apply := corev1ac.Service(pipeline.HostAPIServer, hc.Namespace).
		WithLabels(workloadLabels(kd, pipeline.HostAPIServer)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(typ).
			WithSelector(selector).
			WithPorts(corev1ac.ServicePort().
				WithName("https").
				WithProtocol(corev1.ProtocolTCP).
				WithPort(port).
				WithTargetPort(intstr.FromString("https"))))
	svc, err := services.Apply(ctx, apply, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return nil, hostClusterError("applying Service "+hc.Namespace+"/"+pipeline.HostAPIServer, err)
	}
	return svc, nil
}

// pickNodeAddress chooses the node address a NodePort Service is reached at:
// the previous choice while a node still has it (so the certificate and the
// kubeconfig stay put), else the first Ready node by name, its ExternalIP
// before its InternalIP. Empty when no node has an address.
func pickNodeAddress(nodes []corev1.Node, previous string) string {
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range sorted {
		for _, a := range n.Status.Addresses {
			if previous != "" && a.Address == previous &&
				(a.Type == corev1.NodeExternalIP || a.Type == corev1.NodeInternalIP) {
				return previous
			}
		}
	}
	ready := func(n corev1.Node) bool {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}
	for _, wantReady := range []bool{true, false} {
		for _, typ := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
			for _, n := range sorted {
				if ready(n) != wantReady {
					continue
				}
				for _, a := range n.Status.Addresses {
					if a.Type == typ && a.Address != "" {
						return a.Address
					}
				}
			}
		}
	}
	return ""
}

// etcdClaimPrefix starts the name of each etcd member's claim: the
// StatefulSet's volume claim template is named "data".
const etcdClaimPrefix = "data-"

// claimEtcdVolumes makes sure the claims the etcd StatefulSet will bind, by
// name, are this deployment's: each one that exists must carry its UID (and
// gets its namespace recorded). One that another deployment of the same
// namespace left is taken over only with the annotation
// kao.io/take-over-from naming that deployment, and is then labelled with
// this one's UID; one of another namespace's deployment, or one kao did not
// make, is refused. So a deployment never starts on another's etcd data by
// accident, and the uninstall, which purges by UID, never deletes a claim
// it did not make.
func claimEtcdVolumes(ctx context.Context, kd *kaov1.KarmadaDeployment, hc *pipeline.HostCluster) error {
	m := kd.Spec.Etcd.Managed
	if m == nil || (m.Storage.Type != "" && m.Storage.Type != kaov1.PVCStorage) {
		return nil
	}
	takeOver := kd.Annotations[kaov1.TakeOverFromAnnotation]
	claims := hc.Client.CoreV1().PersistentVolumeClaims(hc.Namespace)
	for _, pod := range inventory.EtcdPodNames(kd) {
		name := etcdClaimPrefix + pod
		pvc, err := claims.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return hostClusterError("reading PersistentVolumeClaim "+hc.Namespace+"/"+name, err)
		}
		owner, ownerNS := pvc.Labels[kaov1.DeploymentUIDLabel], pvc.Annotations[kaov1.DeploymentNamespaceAnnotation]
		switch {
		case owner == string(kd.UID) && ownerNS == kd.Namespace:
			continue
		case owner == string(kd.UID):
		case owner == "":
			return reason.Missing("PersistentVolumeClaim %s/%s in the host cluster was not made by kao, and etcd's StatefulSet would use it: "+
				"kao neither uses nor deletes it; choose another spec.hostCluster.namespace or remove the claim", hc.Namespace, name)
		case ownerNS != kd.Namespace:
			return reason.Missing("PersistentVolumeClaim %s/%s in the host cluster holds the etcd data of a KarmadaDeployment of another namespace: "+
				"kao neither uses nor deletes it; choose another spec.hostCluster.namespace", hc.Namespace, name)
		case owner != takeOver:
			return reason.Missing("PersistentVolumeClaim %s/%s in the host cluster holds the etcd data of another KarmadaDeployment (uid %s): "+
				"to start on that data, annotate this deployment %s=%s; to start empty, delete the claim", hc.Namespace, name, owner, kaov1.TakeOverFromAnnotation, owner)
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q},"annotations":{%q:%q}}}`, kaov1.DeploymentUIDLabel, kd.UID, kaov1.DeploymentNamespaceAnnotation, kd.Namespace)
		if _, err := claims.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
			return hostClusterError("claiming PersistentVolumeClaim "+hc.Namespace+"/"+name, err)
		}
	}
	return nil
}

// recordEtcdClaimsNamespace records the deployment's namespace on the etcd
// claims it owns (its UID) that do not say it yet.
func recordEtcdClaimsNamespace(ctx context.Context, kd *kaov1.KarmadaDeployment, hc *pipeline.HostCluster) error {
	m := kd.Spec.Etcd.Managed
	if m == nil || (m.Storage.Type != "" && m.Storage.Type != kaov1.PVCStorage) {
		return nil
	}
	claims := hc.Client.CoreV1().PersistentVolumeClaims(hc.Namespace)
	list, err := claims.List(ctx, metav1.ListOptions{LabelSelector: kaov1.DeploymentUIDLabel + "=" + string(kd.UID)})
	if err != nil {
		return hostClusterError("listing the etcd claims", err)
	}
	for _, pvc := range list.Items {
		if pvc.Annotations[kaov1.DeploymentNamespaceAnnotation] == kd.Namespace {
			continue
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, kaov1.DeploymentNamespaceAnnotation, kd.Namespace)
		if _, err := claims.Patch(ctx, pvc.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
			return hostClusterError("recording the namespace of PersistentVolumeClaim "+hc.Namespace+"/"+pvc.Name, err)
		}
	}
	return nil
}
