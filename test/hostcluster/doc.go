// Package hostcluster starts a small host Kubernetes cluster on this
// machine for the Containerized end-to-end test: a real kube-apiserver and
// kube-controller-manager (test/members starts them from the tools cache)
// with kwok (hack/tools.sh build kwok) simulating a few nodes, so that
// Deployments and StatefulSets get pods that become Running and Ready.
//
// What is real: the API server, every controller that turns Deployments and
// StatefulSets into pods and binds claims to volumes, and every object a
// client applies. What is simulated: the nodes and the pods' lifecycle
// (kwok marks them Running and Ready; no container runs), and scheduling (a
// binder assigns pending pods to the nodes in turn; there is no
// kube-scheduler, so affinity and tolerations are not weighed). Each node
// has a loopback address of this machine as its InternalIP. Claims bind
// to hostPath PersistentVolumes of a StorageClass without a provisioner
// that binds at once.
//
// Kubelet goes further for the pods a test names: it runs their real
// programs on this machine from the objects the cluster holds (command,
// Secrets, ConfigMaps, volumes), each on a loopback address of its own, with
// Services served by proxies and cluster DNS names in a per-program
// /etc/hosts, node ports served at the nodes' loopback addresses, and it
// gives LoadBalancer Services an address. See Kubelet.
//
// Start skips its test in -short mode; otherwise missing binaries fail the
// test with what to run, never skip it.
package hostcluster
