// Package node starts a real single-node Kubernetes cluster for a test: pods
// run on a real kubelet with a real container runtime, never on a simulated
// one.
//
//	c := node.Start(t, node.Options{})        // torn down in t.Cleanup
//	archive, _ := node.BuildImage(ctx, "./test/node/cmd/echo", node.Image{Name: "kao.test/echo:1"}, t.TempDir())
//	_ = c.ImportImage(archive)                // pods use it with imagePullPolicy: Never
//	client, _ := kubernetes.NewForConfig(c.Config())
//	c.Kubeconfig()                            // a cluster-admin kubeconfig, for kubectl or helm
//
// To share one cluster between a package's tests, start it in TestMain with
// Up and end it with Stop.
//
// # What runs
//
// etcd and kube-apiserver (the envtest assets: the kubernetes and etcd tool
// sets), kube-controller-manager, kube-scheduler, kubelet and kube-proxy
// (the kubernetes-node tool set, all v1.35.4), Debian's containerd 1.6 with
// runc, and the CNI bridge, host-local, portmap and loopback plugins of
// Debian's containernetworking-plugins; CoreDNS 1.14.7 (the coredns tool
// set) is the cluster DNS, as a pod (see below). Images are never pulled:
// the sandbox image is built from ./cmd/pause, CoreDNS's is written around
// the tool set's binary, and tests build theirs the same way (WriteImage
// writes a one-layer OCI archive around a static program with
// internal/ociimage, deterministically) and import them with ImportImage
// (ctr images import).
//
// Every component has its own identity: a CA of the cluster's signs the API
// server's and the kubelet's serving certificates and one client certificate
// per component (system:kube-controller-manager, system:kube-scheduler,
// system:kube-proxy, system:node:NAME), so RBAC's bootstrap roles and the
// Node authorizer apply as in a real cluster; the API server verifies the
// kubelet's certificate when it proxies logs and exec.
//
// # The network
//
// Every process runs in a network namespace of the cluster's own
// (kao-node-N), joined to the machine by one veth (kaonodeN). Cluster N owns
// the /22 at offset N of the pool (DefaultSubnetPool, 10.214.0.0/16):
//
//	10.214.4N.1/24    the machine's end of the veth (HostIP)
//	10.214.4N.2/24    the node (NodeIP): the API server (:6443) and the kubelet (:10250)
//	10.214.4N+1.0/24  pods, on the CNI bridge cni0 inside the namespace (PodCIDR)
//	10.214.4N+2.0/24  Services (ServiceCIDR)
//	10.214.4N+3.0/24  load balancers (LoadBalancerCIDR)
//
// The machine routes the last three ranges to the node. kube-proxy runs in
// iptables mode inside the namespace, so its rules (and portmap's, the
// bridge, the pods' veths and the sysctls the node sets) live and die with
// the namespace: tests reach ClusterIPs, load-balancer addresses and pod
// IPs from the machine, and the machine's own firewall, routes and sysctls
// are never touched beyond the veth and its three routes, which go with
// it. etcd and the controllers' ports listen on the namespace's loopback.
//
// Services of type LoadBalancer get an address as on bare metal with
// MetalLB. An allocator in the test's process (started by Start and Up,
// ended by Stop, gone with the process if the test dies; its log is
// logs/load-balancer.log) watches the Services of every namespace and
// gives each of type LoadBalancer without a spec.loadBalancerClass (it is
// the default implementation) that has no address yet the lowest free
// address, .1 to .254, of the load-balancer range, in
// status.loadBalancer.ingress[0].ip. An address is free again once its
// Service is deleted or stops being a LoadBalancer (the API server then
// clears the status); addresses already in Services' status when the
// allocator starts are kept. kube-proxy forwards what arrives at the
// address on a Service port to the Service's pods, as for a cluster IP.
// The address is in the Service's status 25 to 30 ms after the Service is
// created (0.4 s once, on a busy machine), and the machine's first request
// to it is answered 0.5 to 1.4 s after that, once kube-proxy has synced
// its rules (measured 2026-11-26 on the 2-core machine below). Nothing but
// the machine's route announces the addresses: the machine and the pods
// reach them, other machines do not.
//
// # Cluster DNS
//
// CoreDNS runs as kubeadm runs it: Deployment kube-system/coredns (one
// replica, its service account and cluster role, its Corefile in a
// ConfigMap) behind Service kube-system/kube-dns at the .10 of the Service
// range (DNSServiceIP), and the kubelet gives pods that nameserver and the
// domain cluster.local. Pods resolve SVC.NS.svc.cluster.local, SVC.NS.svc
// and SVC.NS to a Service's cluster IP, POD.SVC.NS.svc.cluster.local to
// a StatefulSet pod's IP behind a headless Service, and the cluster IPs
// and pod IPs back to names. The binary is built with only the plugins it
// uses (hack/tools/coredns: errors, log, health, ready, kubernetes,
// reload). It differs from kubeadm's where an offline machine and our
// images need it:
//   - the Corefile serves only cluster.local and the reverse zones of the
//     pod and Service /24s, and forwards nothing: a name outside them is
//     refused (REFUSED), one inside that does not exist is NXDOMAIN; it
//     caches nothing, so a new Service resolves at once;
//   - CoreDNS runs as uid 65532 with every capability dropped and binds
//     port 53 because the pod lowers net.ipv4.ip_unprivileged_port_start
//     to 53 in its network namespace (kubeadm's image carries a file
//     capability, which a layer without extended attributes cannot);
//   - its readiness probe runs every second.
//
// The objects are created once the API server is ready, the image is
// written and imported while the control plane starts, and Start returns
// once the pod is Ready and the kube-dns Service answers the kubernetes
// Service's name, over UDP and TCP, from the machine. That makes Start
// about 2.5 s longer: up in 9.6 to 10.9 s instead of 7.5 to 8.0 s
// (measured 2026-11-26 on the 2-core machine below), most of it the
// pod's start once the node is Ready and kube-proxy's rules for the
// Service.
//
// # What this machine needs
//
// Measured on a Debian bookworm VM whose cgroups are v1 (hybrid) and whose
// PID 1 is not systemd, as root:
//   - kubelet: failCgroupV1: false, cgroupDriver: cgroupfs, cgroupsPerQOS:
//     false (and so enforceNodeAllocatable: []), failSwapOn: false; image
//     garbage collection off (the images cannot be pulled again) and
//     eviction thresholds at 1%, so a full disk elsewhere does not evict
//     the test's pods;
//   - containerd: restrict_oom_score_adj = true (root here may not lower
//     oom_score_adj; without it runc fails with "can't get final child's PID
//     from pipe: EOF"), netns_mounts_under_state_dir = true, and every
//     directory and socket in the cluster directory;
//   - the API server reaches the kubelet at the node IP
//     (--kubelet-preferred-address-types=InternalIP);
//   - kube-controller-manager and kube-scheduler start once the API server
//     is ready (they exit if RBAC's bootstrap roles are not there yet); the
//     node lifecycle controller removes the node's not-ready taint.
//
// # Life cycle and teardown
//
// Start takes the lowest free index, holding a lock (STATE_ROOT/N.lock)
// for the cluster's life, and records everything it creates in
// STATE_ROOT/N/state.json before creating it. Teardown (t.Cleanup) deletes
// the pods through the API server so that the kubelet and CNI clean up after
// them, stops the processes, kills any container whose shim still names the
// cluster's containerd, unmounts what is mounted below the cluster
// directory, deletes the veth and the namespace, removes libcni's cache
// files of the cluster's network, the kubelet's log links and the machine
// directories it created (if empty), then the directory. A cluster whose
// test binary died (a timeout) is torn down by the next Start on the
// machine, which finds its lock free. Several clusters may run at once.
//
// Start skips its test under -short. Otherwise a machine that cannot run the
// node (not root; containerd, runc, the CNI plugins, iproute2 or nsenter
// missing; tools not built) fails the test with what to install or run.
package node
