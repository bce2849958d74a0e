// Package pipeline is the run pipeline every kao controller shares, from a
// CR to an Ansible run and back into status:
//
//  1. Gatherer reads what the CR references: Secrets (SSH key, known_hosts,
//     member kubeconfigs, PKI, external etcd), the host cluster, the artifacts
//     bundle. Bad input is a reason.Error naming the field.
//  2. AssembleRun builds the run from the CR and those Inputs: the inventory
//     (internal/inventory) and the bundle, then buildRunSpec, a pure function
//     (its goldens are in the kind packages' testdata/runspec).
//  3. A Tracker runs it (one run per object, keyed by UID), RunWithProgress
//     streams progress into status with a StatusWriter, and RunLogs keep
//     each run's log next to its KarmadaDeployment (a restore's too).
//
// It also holds what the kinds share beyond runs: the names of the entry
// playbooks, the operator's Options and Policy, etcd access for snapshots
// (EtcdSourceOf, StreamSnapshot, EtcdutlFor), the state directory's layout
// and its Sweep after a crash.
package pipeline
