package node

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// The cluster DNS is CoreDNS (the coredns tool set) as kubeadm installs
// it: a Deployment in kube-system named coredns, with its service account,
// cluster role and Corefile, behind the Service kube-dns at the .10 of the
// Service range. The differences are the ones an offline test machine
// needs; see corefile and dnsDeployment.
const (
	dnsNamespace = metav1.NamespaceSystem
	// dnsName names the Deployment, its service account and ConfigMap;
	// the cluster role and binding are system:coredns.
	dnsName = "coredns"
	// dnsServiceName is the Service's name, and dnsAppLabel the k8s-app
	// label of the Service and the pods, as kubeadm names them.
	dnsServiceName = "kube-dns"
	dnsAppLabel    = "kube-dns"
	// dnsUser is the uid and gid CoreDNS runs as (the distroless nonroot
	// user, as in CoreDNS's own image).
	dnsUser = 65532
	// dnsHealthPort and dnsReadyPort are the health and ready plugins'
	// default ports: liveness and readiness.
	dnsHealthPort = 8080
	dnsReadyPort  = 8181
)

// writeCoreDNSImage writes CoreDNSImage around the coredns binary to the
// archive path.
func writeCoreDNSImage(binary, archive string) error {
	err := WriteImage(Image{
		Name:   CoreDNSImage,
		Binary: binary,
		User:   fmt.Sprintf("%d:%d", dnsUser, dnsUser),
	}, archive)
	if err != nil {
		return fmt.Errorf("writing the CoreDNS image: %w", err)
	}
	return nil
}

// corefile is the cluster DNS's configuration. It serves the cluster domain
// and the reverse zones of the pod and Service /24s only: there is no
// forward plugin, since the machine is offline, so a name outside those
// zones is refused (REFUSED) rather than forwarded. Nothing is cached:
// the kubernetes plugin answers from its informers' caches, and a test
// sees a new Service's name at once. Pod records (1-2-3-4.NS.pod) are
// answered without a pod informer (pods insecure), as kubeadm's Corefile
// does.
func corefile(a addresses) string {
	return fmt.Sprintf(`%s:53 %s:53 %s:53 {
    errors
    log . {
        class error
    }
    health {
        lameduck 5s
    }
    ready
    kubernetes {
        pods insecure
    }
    reload
}
`, dnsDomain, reverseZone(a.Pods), reverseZone(a.Services))
}

// reverseZone is the in-addr.arpa zone of an IPv4 /24.
func reverseZone(p netip.Prefix) string {
	b := p.Addr().As4()
	return fmt.Sprintf("%d.%d.%d.in-addr.arpa", b[2], b[1], b[0])
}

// installDNS creates the cluster DNS's objects. It runs once the API server
// is ready, before the controllers and the kubelet start, so the pod is
// scheduled and started as soon as they are.
func installDNS(ctx context.Context, client kubernetes.Interface, a addresses) error {
	labels := map[string]string{"k8s-app": dnsAppLabel}
	create := func(what string, err error) error {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the cluster DNS's %s: %w", what, err)
		}
		return nil
	}
	opts := metav1.CreateOptions{}
	_, err := client.CoreV1().ServiceAccounts(dnsNamespace).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: dnsName, Namespace: dnsNamespace},
	}, opts)
	if err := create("service account", err); err != nil {
		return err
	}
	// What the kubernetes plugin lists and watches: no pods, since it
	// answers pod records without reading them.
	_, err = client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:" + dnsName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}, opts)
	if err := create("cluster role", err); err != nil {
		return err
	}
	_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "system:" + dnsName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:" + dnsName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: dnsName, Namespace: dnsNamespace}},
	}, opts)
	if err := create("cluster role binding", err); err != nil {
		return err
	}
	_, err = client.CoreV1().ConfigMaps(dnsNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: dnsName, Namespace: dnsNamespace},
		Data:       map[string]string{"Corefile": corefile(a)},
	}, opts)
	if err := create("Corefile", err); err != nil {
		return err
	}
	_, err = client.AppsV1().Deployments(dnsNamespace).Create(ctx, dnsDeployment(labels), opts)
	if err := create("Deployment", err); err != nil {
		return err
	}
	_, err = client.CoreV1().Services(dnsNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: dnsServiceName, Namespace: dnsNamespace, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector:  labels,
			ClusterIP: a.DNSService.String(),
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	}, opts)
	return create("Service", err)
}

// dnsDeployment is kubeadm's CoreDNS Deployment with two differences.
// CoreDNS binds port 53 as a non-root user: kubeadm's image gives the
// binary the file capability cap_net_bind_service, which our one-layer
// images cannot carry (no extended attributes), so the pod lowers
// net.ipv4.ip_unprivileged_port_start (a safe, namespaced sysctl) to 53 in
// its own network namespace instead, and drops every capability. And the
// readiness probe runs every second, not every ten, so Start does not wait
// ten seconds for a second probe.
func dnsDeployment(labels map[string]string) *appsv1.Deployment {
	replicas, user, no, yes := int32(1), int64(dnsUser), false, true
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: dnsName, Namespace: dnsNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: dnsName,
					PriorityClassName:  "system-cluster-critical",
					// CoreDNS must not resolve through itself.
					DNSPolicy: corev1.DNSDefault,
					SecurityContext: &corev1.PodSecurityContext{
						Sysctls:        []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "53"}},
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:            dnsName,
						Image:           CoreDNSImage,
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"-conf", "/etc/coredns/Corefile"},
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
						},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{
								corev1.ResourceCPU:    resource.MustParse("100m"),
								corev1.ResourceMemory: resource.MustParse("70Mi"),
							},
							Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
						LivenessProbe: &corev1.Probe{
							ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(dnsHealthPort)}},
							InitialDelaySeconds: 60,
							TimeoutSeconds:      5,
							FailureThreshold:    5,
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(dnsReadyPort)}},
							PeriodSeconds: 1,
						},
						SecurityContext: &corev1.SecurityContext{
							RunAsUser:                &user,
							RunAsGroup:               &user,
							RunAsNonRoot:             &yes,
							AllowPrivilegeEscalation: &no,
							ReadOnlyRootFilesystem:   &yes,
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: []corev1.Volume{{
						Name: "config-volume",
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: dnsName},
							Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
						}},
					}},
				},
			},
		},
	}
}

// waitForDNS waits until the cluster DNS's pod is Ready and the kube-dns
// Service answers, over UDP and over TCP, the kubernetes Service's name
// with its cluster IP. The questions go from the machine, through
// kube-proxy's rules in the node's network namespace, as a pod's do.
func (c *Cluster) waitForDNS(ctx context.Context, client kubernetes.Interface) error {
	var pod string
	err := c.waitFor(ctx, c.opts.StartTimeout, "the cluster DNS's pod to be Ready", c.l.log("kubelet"), func() (bool, error) {
		pods, err := client.CoreV1().Pods(dnsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + dnsAppLabel})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					pod = p.Name
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	name := "kubernetes.default.svc." + dnsDomain + "."
	want := []string{c.a.APIService.String()}
	return c.waitFor(ctx, time.Minute, "the cluster DNS to answer "+name, c.dnsLog(pod), func() (bool, error) {
		for _, network := range []string{"udp", "tcp"} {
			// A question lost while kube-proxy programs the Service is
			// asked again at the next poll, rather than waited for.
			qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			got, err := lookupVia(qctx, network, c.a.DNSService, name)
			cancel()
			if err != nil || !slices.Equal(got, want) {
				return false, nil
			}
		}
		return true, nil
	})
}

// lookupVia resolves name with the DNS server at server:53 alone, over
// network (udp or tcp).
func lookupVia(ctx context.Context, network string, server netip.Addr, name string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, netip.AddrPortFrom(server, 53).String())
	}}
	return r.LookupHost(ctx, name)
}

// dnsLog is the log of the cluster DNS pod's container, as the kubelet
// writes it (pod-logs/NS_POD_UID/CONTAINER/N.log), or the kubelet's log if
// there is none yet.
func (c *Cluster) dnsLog(pod string) string {
	logs, _ := filepath.Glob(filepath.Join(c.l.podLogs(), dnsNamespace+"_"+pod+"_*", dnsName, "*.log"))
	if len(logs) == 0 {
		return c.l.log("kubelet")
	}
	return logs[len(logs)-1]
}
