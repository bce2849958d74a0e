package e2e

import (
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/metrics"
	"github.com/kao-io/kao/internal/testenv"
)

// metricsURL is the /metrics endpoint that controller-runtime's metrics
// server, started by TestMain, serves for every manager of this test
// binary. The tests read kao's metrics from it as Prometheus would: over
// HTTP, in the text format.
var metricsURL string

// metricsTimeout is how long the metrics may lag status: the state series
// follow the managers' caches, a moment behind the API.
const metricsTimeout = time.Minute

// waitForMetrics scrapes the metrics endpoint until check passes and
// returns that scrape.
func waitForMetrics(t testing.TB, what string, check func(testenv.Samples) error) testenv.Samples {
	t.Helper()
	var last error
	for deadline := time.Now().Add(metricsTimeout); ; time.Sleep(500 * time.Millisecond) {
		s, err := testenv.Scrape(metricsURL)
		if err == nil {
			if err = check(s); err == nil {
				return s
			}
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("metrics: %s: %v", what, last)
		}
	}
}

// of labels a deployment's series, with more label pairs.
func of(kd *kaov1.KarmadaDeployment, more ...string) map[string]string {
	return testenv.Labels(map[string]string{"namespace": kd.Namespace, "deployment": kd.Name}, more...)
}

// atLeast fails unless the series of name matching labels add up to min or more.
func atLeast(s testenv.Samples, name string, labels map[string]string, min float64) error {
	if got := s.Sum(name, labels); got < min {
		return fmt.Errorf("%s%v = %g, want at least %g", name, labels, got, min)
	}
	return nil
}

// equal fails unless exactly one series of name matches labels, with value want.
func equal(s testenv.Samples, name string, labels map[string]string, want float64) error {
	m := s.Match(name, labels)
	if len(m) != 1 || m[0].Value != want {
		return fmt.Errorf("%s%v: %v, want one series of %g", name, labels, m, want)
	}
	return nil
}

// firstError is the first error of checks, in order.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkInstallMetrics checks what a healthy Binary install on three hosts
// shows: its successful run, healthy etcd with a leader and a database,
// every certificate's expiry, ready components.
func checkInstallMetrics(t *testing.T, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	waitForMetrics(t, "after the install", func(s testenv.Samples) error {
		cur := get(t, kd)
		if cur.Status.LastSuccessfulRunTime == nil {
			return fmt.Errorf("status.lastSuccessfulRunTime is not set")
		}
		errs := []error{
			atLeast(s, metrics.RunsStarted, of(kd, "playbook", "install.yml"), 1),
			atLeast(s, metrics.RunsFinished, of(kd, "playbook", "install.yml", "result", "Succeeded"), 1),
			atLeast(s, metrics.RunDuration+"_sum", of(kd, "playbook", "install.yml", "result", "Succeeded"), 1),
			equal(s, metrics.DeploymentSuccess, of(kd), float64(cur.Status.LastSuccessfulRunTime.Unix())),
			equal(s, metrics.DeploymentCond, of(kd, "condition", kaov1.EtcdHealthyCondition, "status", "True"), 1),
			equal(s, metrics.EtcdMembers, of(kd), 3),
			equal(s, metrics.EtcdHealthy, of(kd), 3),
			equal(s, metrics.EtcdLeader, of(kd), 1),
			equal(s, metrics.ComponentReady, of(kd, "component", "karmada-apiserver"), 1),
			equal(s, metrics.DeploymentInfo, of(kd, "mode", "Binary", "version", cur.Spec.Version), 1),
		}
		if n := len(s.Match(metrics.EtcdDBSize, of(kd))); n != 3 || s.Sum(metrics.EtcdDBSize, of(kd)) < 3*4096 {
			errs = append(errs, fmt.Errorf("want three etcd database sizes of some kilobytes:\n%s", s.Dump(metrics.EtcdDBSize)))
		}
		for _, c := range cur.Status.Certificates {
			errs = append(errs, equal(s, metrics.CertExpiry, of(kd, "certificate", c.Name), float64(c.NotAfter.Unix())))
		}
		return firstError(errs...)
	})
}

// failureMetrics are the counts a failed run moves.
type failureMetrics struct {
	failedRuns, failedTasks, retries float64
}

func readFailureMetrics(t *testing.T, kd *kaov1.KarmadaDeployment) failureMetrics {
	t.Helper()
	s, err := testenv.Scrape(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	return failureMetrics{
		failedRuns:  s.Sum(metrics.RunsFinished, of(kd, "result", "Failed")),
		failedTasks: s.Sum(metrics.RunFailedTasks, of(kd)),
		retries:     s.Sum(metrics.RunRetries, of(kd)),
	}
}

// checkFailureMetrics checks that one more failed run, with failed tasks and
// a retry, was counted since before, and that the state shows the failure.
func checkFailureMetrics(t *testing.T, kd *kaov1.KarmadaDeployment, before failureMetrics) {
	t.Helper()
	waitForMetrics(t, "after a failed run", func(s testenv.Samples) error {
		return firstError(
			atLeast(s, metrics.RunsFinished, of(kd, "result", "Failed"), before.failedRuns+1),
			atLeast(s, metrics.RunFailedTasks, of(kd), before.failedTasks+1),
			atLeast(s, metrics.RunRetries, of(kd), before.retries+1),
			atLeast(s, metrics.DeploymentFails, of(kd), 1),
			equal(s, metrics.DeploymentCond, of(kd, "condition", kaov1.PlaybookSucceededCondition, "status", "False"), 1),
		)
	})
}

// checkBackupMetrics checks a backup's counted snapshot and its state.
func checkBackupMetrics(t *testing.T, eb *kaov1.EtcdBackup) {
	t.Helper()
	labels := map[string]string{"namespace": eb.Namespace, "backup": eb.Name, "deployment": eb.Spec.DeploymentName}
	waitForMetrics(t, "after a backup", func(s testenv.Samples) error {
		cur := &kaov1.EtcdBackup{}
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(eb), cur); err != nil {
			return err
		}
		snap := cur.Status.LastSnapshot
		if snap == nil {
			return fmt.Errorf("no snapshot in status")
		}
		return firstError(
			atLeast(s, metrics.BackupSnapshots, testenv.Labels(labels, "result", "Succeeded"), 1),
			atLeast(s, metrics.BackupDuration+"_count", labels, 1),
			equal(s, metrics.BackupLastSuccess, labels, float64(snap.Time.Unix())),
			equal(s, metrics.BackupLastSize, labels, float64(snap.Size.Value())),
			equal(s, metrics.BackupRetained, labels, float64(len(cur.Status.Snapshots))),
			equal(s, metrics.BackupCreated, labels, float64(cur.CreationTimestamp.Unix())),
		)
	})
}

// checkRestoreMetrics checks a restore's counted end, its run and its phase.
func checkRestoreMetrics(t *testing.T, er *kaov1.EtcdRestore, result string) {
	t.Helper()
	waitForMetrics(t, "after a restore", func(s testenv.Samples) error {
		dep := map[string]string{"namespace": er.Namespace, "deployment": er.Spec.DeploymentName}
		with := func(kv ...string) map[string]string { return testenv.Labels(dep, kv...) }
		return firstError(
			atLeast(s, metrics.RestoresFinished, with("result", result), 1),
			atLeast(s, metrics.RunsFinished, with("playbook", pipeline.EtcdRestorePlaybook, "result", result), 1),
			equal(s, metrics.RestorePhase, with("restore", er.Name, "phase", result), 1),
		)
	})
}

// checkCertificateMetrics checks that the expiry series of a certificate
// that was re-issued says what status says, which is no longer old.
func checkCertificateMetrics(t *testing.T, kd *kaov1.KarmadaDeployment, name string, old time.Time) {
	t.Helper()
	waitForMetrics(t, "after a certificate was re-issued", func(s testenv.Samples) error {
		cur := get(t, kd)
		for _, c := range cur.Status.Certificates {
			if c.Name != name {
				continue
			}
			if c.NotAfter.Time.Equal(old) {
				return fmt.Errorf("status: %s still expires at %s", name, old)
			}
			return equal(s, metrics.CertExpiry, of(kd, "certificate", name), float64(c.NotAfter.Unix()))
		}
		return fmt.Errorf("status.certificates has no %s", name)
	})
}
