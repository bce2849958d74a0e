// Package etcdbackup is the EtcdBackup controller: it takes an etcd
// snapshot of a KarmadaDeployment when its schedule (schedule.go) says one is
// due, or once, through the pipeline's etcd access (a healthy member, checked
// with the operator's own etcdutl), stores it locally or on an SSH host
// (snapshot.go), prunes by retention, and records the result in status.
package etcdbackup
