// Package controllertest holds what the controller packages' tests share:
// the API server of a package's tests (Main, Env, K8s), builders of
// deployments, backups and restores, a real etcd cluster on loopback, the
// test playbooks, and the run-spec goldens' helpers.
package controllertest
