// Package members starts small, real Kubernetes clusters on this machine for
// tests that join member clusters to Karmada.
//
// A member is a kube-apiserver and a kube-controller-manager (the tools
// cache's binaries, `make tools`) with its own CA, serving certificate and
// service-account key, bound to one address on a free port. All members of a
// Start share one etcd, each under its own key prefix, so each is a cluster
// of its own: its own objects and its own kube-system namespace UID, which
// Karmada takes as the cluster's ID. The controller manager runs only what a
// member without nodes needs for Karmada: service-account tokens, namespace
// deletion, garbage collection and the kube-root-ca.crt publisher. There is
// no kubelet and no scheduler: Deployments are stored, never run.
//
// Start skips its test in -short mode; otherwise missing binaries fail the
// test with what to run, never skip it.
package members
