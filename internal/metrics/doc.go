// Package metrics is what kao tells Prometheus: every series is labelled by
// the object's namespace and name (and the deployment it belongs to), never
// by anything a Secret holds.
//
// Two kinds of series, kept apart because they answer different questions:
//
//   - Events counted as they happen (runs started and finished, their
//     durations, failed tasks by role, retries, snapshots taken and pruned,
//     restores ended). The reconcilers call the functions in events.go; the
//     series of an object go when the object is deleted.
//   - State read from the objects' status at scrape time (readiness,
//     versions, etcd health and size, certificate expiry, members, the last
//     good backup), the way kube-state-metrics does it: the numbers are
//     exactly what `kubectl get -o yaml` shows, a deleted object leaves no
//     stale series, and nothing has to remember to update a gauge. Only the
//     elected leader exports them, so two replicas never report one
//     deployment twice.
//
// Names and units follow Prometheus conventions (_total, _seconds, _bytes,
// timestamps as seconds since the epoch). docs/metrics.md says what each
// means; Catalog lists them for the tests of the alerting rules and the
// dashboard.
package metrics
