package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/node"
)

// BenchmarkContainerizedInstall times, in one run, the same HA control
// plane (three etcd members, one of each component) made two ways through
// the operator: Containerized, every component a real container on one real
// node (test/node, images from `make images` already imported), and Binary
// on three fresh SSH test hosts (the baseline). Each is timed from creating
// the KarmadaDeployment to Ready, one after the other so that they do not
// share the two cores; it then prints where each install run's time went.
// Run it with
//
//	go test ./test/e2e/ -run '^$' -bench ContainerizedInstall -benchtime 1x -timeout 30m
func BenchmarkContainerizedInstall(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := node.Start(b, node.Options{})
		importComponentImages(b, c)
		client, err := kubernetes.NewForConfig(c.Config())
		if err != nil {
			b.Fatal(err)
		}
		localVolumes(b, c, client, podsStorageClass, 3)
		ns := newNamespace(b)
		startOperator(b, ns)
		createSecret(b, ns, "host-cluster", map[string][]byte{
			"kubeconfig": serviceAccountKubeconfig(b, client, flatKubeconfig(b, c)),
		})
		dc := hosts.Start(b, 3)
		createSSHSecret(b, ns, "dc-ssh", dc)
		b.StartTimer()

		containerized, containerizedRun, containerizedLog := timeToReady(b, podsDeployment(ns, "pods", "v1.18.1"))
		binary, binaryRun, binaryLog := timeToReady(b, binaryDeployment(ns, "bench", "dc-ssh", dc.Hosts()))
		b.StopTimer()

		b.ReportMetric(containerized.Seconds(), "containerized-s")
		b.ReportMetric(binary.Seconds(), "binary-s")
		b.ReportMetric(containerized.Seconds()/binary.Seconds(), "containerized/binary")
		fmt.Printf("\n%-44s %10s %10s\n", "created to Ready", "total", "playbook")
		fmt.Printf("%-44s %10s %10s\n", "Containerized, one real node", containerized.Round(100*time.Millisecond), containerizedRun.Round(100*time.Millisecond))
		fmt.Printf("%-44s %10s %10s\n", "Binary, three SSH test hosts (baseline)", binary.Round(100*time.Millisecond), binaryRun.Round(100*time.Millisecond))
		fmt.Printf("%-44s %10.2f\n", "ratio Containerized / Binary", containerized.Seconds()/binary.Seconds())
		printRunBreakdown("Containerized install", containerizedLog)
		printRunBreakdown("Binary install", binaryLog)
	}
}

// timeToReady creates kd and returns how long it took to be Ready, how long
// its install run took, and the run's log.
func timeToReady(b *testing.B, kd *kaov1.KarmadaDeployment) (time.Duration, time.Duration, string) {
	b.Helper()
	start := time.Now()
	if err := k8s.Create(context.Background(), kd); err != nil {
		b.Fatal(err)
	}
	ready := waitForCondition(b, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 10*time.Minute)
	took := time.Since(start)
	return took, runDuration(b, ready), lastRunLog(b, ready)
}
