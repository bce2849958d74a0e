package controllers

import (
	"context"
	"encoding/base64"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/kubeconfig"
)

// Names of a Containerized control plane's objects in its host cluster
// namespace. The karmada_workloads role creates the workloads under the same
// names (its defaults), and kao's certificates name the Services.
const (
	hostAPIServer             = "karmada-apiserver"
	hostAggregatedAPIServer   = "karmada-aggregated-apiserver"
	hostKubeControllerManager = "kube-controller-manager"
	hostControllerManager     = "karmada-controller-manager"
	hostScheduler             = "karmada-scheduler"
	hostWebhook               = "karmada-webhook"
	// The addons' Deployments and Services; each member's estimator is
	// karmada-scheduler-estimator-<member> (estimatorComponentPfx).
	hostSearch         = "karmada-search"
	hostMetricsAdapter = "karmada-metrics-adapter"
	hostDescheduler    = "karmada-descheduler"
	// hostEstimatorPort is the port of every estimator's Service
	// (karmada_workloads_estimator_port), which karmada-scheduler dials.
	hostEstimatorPort = 10352
	// hostEtcd is the etcd StatefulSet and its headless Service, which gives
	// every member the DNS name <hostEtcd>-<i>.<hostEtcd>.<namespace>.svc.
	hostEtcd = "karmada-etcd"
	// hostEtcdClient is the Service etcd clients use.
	hostEtcdClient = "karmada-etcd-client"

	defaultHostNamespace = "karmada-system"
	defaultDNSDomain     = "cluster.local"
)

// Labels of the objects in the host cluster. Workloads are selected by
// component and deployment UID, so that nothing else in the namespace is.
const (
	componentLabel = "app.kubernetes.io/name"
	partOfLabel    = "app.kubernetes.io/part-of"
	managedByLabel = "app.kubernetes.io/managed-by"
)

// fieldManager is the server-side apply field manager of kao's own writes to a
// host cluster (the role applies the workloads as "kao" too).
const fieldManager = "kao"

// hostCluster is the host cluster of a Containerized deployment as one
// reconcile uses it.
type hostCluster struct {
	// client talks to the host cluster.
	client kubernetes.Interface
	// kubeconfig reaches the host cluster from a run (kubernetes.core); it
	// holds credentials.
	kubeconfig []byte
	// secrets are the credential values in kubeconfig, for redaction.
	secrets [][]byte
	// namespace is spec.hostCluster.namespace with its default.
	namespace string
	// dnsDomain is spec.hostCluster.dnsDomain with its default.
	dnsDomain string
	// inCluster says the host cluster is the operator's own cluster, whose
	// Service names the operator resolves.
	inCluster bool
}

// hostNamespace is the host cluster namespace of a Containerized deployment.
func hostNamespace(kd *kaov1.KarmadaDeployment) string {
	if hc := kd.Spec.HostCluster; hc != nil && hc.Namespace != "" {
		return hc.Namespace
	}
	return defaultHostNamespace
}

// hostDNSDomain is the host cluster's DNS domain.
func hostDNSDomain(kd *kaov1.KarmadaDeployment) string {
	if hc := kd.Spec.HostCluster; hc != nil && hc.DNSDomain != "" {
		return hc.DNSDomain
	}
	return defaultDNSDomain
}

// serviceNames are the two DNS names of a host cluster Service: short
// (<name>.<namespace>.svc, what kube-apiserver verifies for a service
// reference) and fully qualified (with the DNS domain, what pods resolve).
func serviceNames(kd *kaov1.KarmadaDeployment, name string) []string {
	short := name + "." + hostNamespace(kd) + ".svc"
	return []string{short, short + "." + hostDNSDomain(kd)}
}

// etcdMemberNames are the pod names of a Containerized managed etcd cluster.
func etcdMemberNames(kd *kaov1.KarmadaDeployment) []string {
	n := int32(1)
	if m := kd.Spec.Etcd.Managed; m != nil && m.Replicas != nil {
		n = *m.Replicas
	}
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, hostEtcd+"-"+strconv.Itoa(int(i)))
	}
	return out
}

// etcdMemberURL is the client URL of a Containerized etcd member.
func etcdMemberURL(kd *kaov1.KarmadaDeployment, pod string) string {
	return "https://" + net.JoinHostPort(pod+"."+serviceNames(kd, hostEtcd)[1], strconv.Itoa(etcdClientPort))
}

// hostCluster connects to the host cluster of a Containerized deployment:
// with the kubeconfig Secret spec.hostCluster names, or, with inCluster,
// as the operator itself. Problems the user can fix are reason.Missing errors.
func (g *gatherer) hostCluster(ctx context.Context, kd *kaov1.KarmadaDeployment) (*hostCluster, error) {
	spec := kd.Spec.HostCluster
	if spec == nil {
		return nil, reason.Missing("spec.hostCluster is required in Containerized mode")
	}
	hc := &hostCluster{namespace: hostNamespace(kd), dnsDomain: hostDNSDomain(kd), inCluster: spec.InCluster}
	var cfg *clientcmdapi.Config
	if spec.InCluster {
		if err := g.checkInCluster(kd); err != nil {
			return nil, err
		}
		if g.InClusterConfig == nil {
			return nil, reason.Missing("spec.hostCluster.inCluster is set, but the operator has no configuration for its own cluster")
		}
		cfg = kubeconfigFromREST(g.InClusterConfig)
		var err error
		if hc.kubeconfig, err = clientcmd.Write(*cfg); err != nil {
			return nil, fmt.Errorf("encoding the host cluster's kubeconfig: %w", err)
		}
		hc.secrets = kubeconfigSecrets(cfg, hc.kubeconfig)
	} else {
		ref := spec.KubeconfigSecretRef
		data, err := g.secretValue(ctx, kd.Namespace, *ref, "spec.hostCluster.kubeconfigSecretRef")
		if err != nil {
			return nil, err
		}
		min, err := kubeconfig.Minimize(data, "")
		if err != nil {
			return nil, reason.Missing("Secret %s/%s key %q named in spec.hostCluster.kubeconfigSecretRef: %v",
				kd.Namespace, ref.Name, ref.Key, err)
		}
		cfg, hc.kubeconfig, hc.secrets = min.Config, min.Data, min.Secrets
	}
	restConfig, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, reason.Missing("%s", "the host cluster's kubeconfig is unusable: "+sanitizeKubeconfigError(err))
	}
	restConfig.UserAgent = "kao-operator"
	if hc.client, err = kubernetes.NewForConfig(restConfig); err != nil {
		return nil, reason.Missing("%s", "the host cluster's kubeconfig is unusable: "+sanitizeKubeconfigError(err))
	}
	return hc, nil
}

// kubeconfigFromREST writes the operator's own client configuration as a
// kubeconfig for runs. A service-account token stays a file reference: the
// kubelet renews the file, and Ansible runs in the operator's pod.
func kubeconfigFromREST(rc *rest.Config) *clientcmdapi.Config {
	cluster := &clientcmdapi.Cluster{
		Server:                   rc.Host,
		CertificateAuthority:     rc.CAFile,
		CertificateAuthorityData: rc.CAData,
		TLSServerName:            rc.ServerName,
	}
	user := &clientcmdapi.AuthInfo{
		ClientCertificate:     rc.CertFile,
		ClientCertificateData: rc.CertData,
		ClientKey:             rc.KeyFile,
		ClientKeyData:         rc.KeyData,
		TokenFile:             rc.BearerTokenFile,
	}
	if rc.BearerTokenFile == "" {
		user.Token = rc.BearerToken
	}
	return &clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"host": cluster},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"kao": user},
		Contexts:       map[string]*clientcmdapi.Context{"host": {Cluster: "host", AuthInfo: "kao"}},
		CurrentContext: "host",
	}
}

// kubeconfigSecrets lists the credential values of a kubeconfig and the file
// itself, in every form a log could show them.
func kubeconfigSecrets(cfg *clientcmdapi.Config, file []byte) [][]byte {
	out := [][]byte{file}
	for _, u := range cfg.AuthInfos {
		for _, v := range [][]byte{u.ClientKeyData, []byte(u.Token), []byte(u.Password)} {
			if len(v) == 0 {
				continue
			}
			out = append(out, v, []byte(base64.StdEncoding.EncodeToString(v)))
		}
	}
	return out
}

// sanitizeKubeconfigError keeps client-go's first line, which names what is
// wrong without the file's content.
func sanitizeKubeconfigError(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return truncateString(msg, 300)
}

// hostClusterError describes a failed request to the host cluster for a
// condition: the Kubernetes status message, which names the object and the
// cause, or the connection error; never a credential.
func hostClusterError(what string, err error) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return reason.Invalid(kaov1.HostClusterUnreachableReason, "%s", truncateString(fmt.Sprintf("%s in the host cluster: %s", what, status.Status().Message), 900))
	}
	return reason.Invalid(kaov1.HostClusterUnreachableReason, "%s", truncateString(fmt.Sprintf("%s in the host cluster: %v", what, err), 900))
}

// exposeAPIServer makes sure karmada-apiserver's Service exists in the host
// cluster and returns the endpoint (host:port) clients reach it at. kao's Go
// side owns this one Service, not the role: its address must be known before
// a run, because karmada-apiserver's certificate names it and the run reaches
// karmada-apiserver there. spec.apiServer.endpoint wins when set; otherwise
// ClusterIP is the Service's DNS name, NodePort a node's address with the
// node port, and LoadBalancer the address the load balancer assigned (an
// ExposurePending *reason.Error until it has one).
func exposeAPIServer(ctx context.Context, kd *kaov1.KarmadaDeployment, hc *hostCluster) (string, error) {
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
			return "", reason.Pending(kaov1.ExposurePendingReason, exposurePollInterval, "Service %s/%s has no node port yet", hc.namespace, hostAPIServer)
		}
		nodes, err := hc.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
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
		return "", reason.Pending(kaov1.ExposurePendingReason, exposurePollInterval, "waiting for the host cluster's load balancer to give Service %s/%s an address", hc.namespace, hostAPIServer)
	default:
		return net.JoinHostPort(serviceNames(kd, hostAPIServer)[1], strconv.Itoa(port)), nil
	}
}

// securePort is spec.apiServer.securePort with its default.
func securePort(kd *kaov1.KarmadaDeployment) int {
	if p := kd.Spec.APIServer.SecurePort; p != 0 {
		return int(p)
	}
	return defaultSecurePort
}

// ensureHostNamespace creates the host cluster namespace when it is missing.
// kao never deletes it: volumes kept after an uninstall live there, and the
// namespace may be someone else's.
func ensureHostNamespace(ctx context.Context, hc *hostCluster) error {
	_, err := hc.client.CoreV1().Namespaces().Get(ctx, hc.namespace, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return hostClusterError("reading namespace "+hc.namespace, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hc.namespace}}
	if _, err := hc.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return hostClusterError("creating namespace "+hc.namespace, err)
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
func applyAPIServerService(ctx context.Context, kd *kaov1.KarmadaDeployment, hc *hostCluster) (*corev1.Service, error) {
	services := hc.client.CoreV1().Services(hc.namespace)
	cur, err := services.Get(ctx, hostAPIServer, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, hostClusterError("reading Service "+hc.namespace+"/"+hostAPIServer, err)
	case cur.Labels[kaov1.DeploymentUIDLabel] != string(kd.UID):
		owner := "was not made by kao"
		if uid := cur.Labels[kaov1.DeploymentUIDLabel]; uid != "" {
			owner = "belongs to another KarmadaDeployment (uid " + uid + ")"
		}
		return nil, reason.Missing("Service %s/%s in the host cluster %s: a namespace holds one control plane; choose another spec.hostCluster.namespace",
			hc.namespace, hostAPIServer, owner)
	}
	port := kd.Spec.APIServer.SecurePort
	if port == 0 {
		port = defaultSecurePort
	}
	typ := corev1.ServiceType(kd.Spec.APIServer.ServiceType)
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	selector := map[string]string{componentLabel: hostAPIServer, kaov1.DeploymentUIDLabel: string(kd.UID)}
	apply := corev1ac.Service(hostAPIServer, hc.namespace).
		WithLabels(workloadLabels(kd, hostAPIServer)).
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
		return nil, hostClusterError("applying Service "+hc.namespace+"/"+hostAPIServer, err)
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
func claimEtcdVolumes(ctx context.Context, kd *kaov1.KarmadaDeployment, hc *hostCluster) error {
	m := kd.Spec.Etcd.Managed
	if m == nil || (m.Storage.Type != "" && m.Storage.Type != kaov1.PVCStorage) {
		return nil
	}
	takeOver := kd.Annotations[kaov1.TakeOverFromAnnotation]
	claims := hc.client.CoreV1().PersistentVolumeClaims(hc.namespace)
	for _, pod := range etcdMemberNames(kd) {
		name := etcdClaimPrefix + pod
		pvc, err := claims.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return hostClusterError("reading PersistentVolumeClaim "+hc.namespace+"/"+name, err)
		}
		owner, ownerNS := pvc.Labels[kaov1.DeploymentUIDLabel], pvc.Annotations[kaov1.DeploymentNamespaceAnnotation]
		switch {
		case owner == string(kd.UID) && ownerNS == kd.Namespace:
			continue
		case owner == string(kd.UID):
		case owner == "":
			return reason.Missing("PersistentVolumeClaim %s/%s in the host cluster was not made by kao, and etcd's StatefulSet would use it: "+
				"kao neither uses nor deletes it; choose another spec.hostCluster.namespace or remove the claim", hc.namespace, name)
		case ownerNS != kd.Namespace:
			return reason.Missing("PersistentVolumeClaim %s/%s in the host cluster holds the etcd data of a KarmadaDeployment of another namespace: "+
				"kao neither uses nor deletes it; choose another spec.hostCluster.namespace", hc.namespace, name)
		case owner != takeOver:
			return reason.Missing("PersistentVolumeClaim %s/%s in the host cluster holds the etcd data of another KarmadaDeployment (uid %s): "+
				"to start on that data, annotate this deployment %s=%s; to start empty, delete the claim", hc.namespace, name, owner, kaov1.TakeOverFromAnnotation, owner)
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q},"annotations":{%q:%q}}}`, kaov1.DeploymentUIDLabel, kd.UID, kaov1.DeploymentNamespaceAnnotation, kd.Namespace)
		if _, err := claims.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
			return hostClusterError("claiming PersistentVolumeClaim "+hc.namespace+"/"+name, err)
		}
	}
	return nil
}

// recordEtcdClaimsNamespace records the deployment's namespace on the etcd
// claims it owns (its UID) that do not say it yet.
func recordEtcdClaimsNamespace(ctx context.Context, kd *kaov1.KarmadaDeployment, hc *hostCluster) error {
	m := kd.Spec.Etcd.Managed
	if m == nil || (m.Storage.Type != "" && m.Storage.Type != kaov1.PVCStorage) {
		return nil
	}
	claims := hc.client.CoreV1().PersistentVolumeClaims(hc.namespace)
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
			return hostClusterError("recording the namespace of PersistentVolumeClaim "+hc.namespace+"/"+pvc.Name, err)
		}
	}
	return nil
}
