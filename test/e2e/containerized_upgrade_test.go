package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

// upgradeContainerized upgrades a Ready Containerized control plane on
// Karmada v1.17.1 twice, as TestBinaryUpgrade does a Binary one: first
// karmada-scheduler alone (spec.components.scheduler.version), then
// everything (spec.version v1.18.1). Each upgrade must be an upgrade.yml run
// that took an etcd snapshot first, moved exactly the components whose
// version differs, one Deployment after the other in Karmada's order (the
// CRDs before the components), and left every Deployment on its target
// image. It returns the deployment, Ready on v1.18.1.
//
// On the simulated host cluster (TestContainerizedVariants) kwok decides the
// pods' readiness, so it proves the order, the gates and the status; on the
// real node (TestContainerizedOnRealPods) real Deployments roll onto the
// v1.18.1 images and their probes gate each rollout. Neither proves that a
// rolling update never drops a request: TestBinaryUpgrade's prober does
// that for the Binary path.
//
// Each upgrade takes its snapshot first, except the one at spec.version
// skipBackupAt (none if ""): it goes without, as annotation
// kao.io/upgrade-without-backup asks, and its run must say so with an Event.
func upgradeContainerized(t *testing.T, client kubernetes.Interface, kd *kaov1.KarmadaDeployment, stateDir, skipBackupAt string) *kaov1.KarmadaDeployment {
	t.Helper()
	ns := kd.Spec.HostCluster.Namespace
	allow := func(version string) {
		if version == skipBackupAt {
			changeDeployment(t, kd, func(kd *kaov1.KarmadaDeployment) {
				metav1.SetMetaDataAnnotation(&kd.ObjectMeta, kaov1.UpgradeWithoutBackupAnnotation, version)
			})
		}
	}
	check := func(done *kaov1.KarmadaDeployment, version string, moves []string) {
		t.Helper()
		if version != skipBackupAt {
			checkContainerizedUpgrade(t, done, stateDir, moves)
			return
		}
		checkUpgradeRun(t, done, moves)
		if !slices.ContainsFunc(deploymentEvents(t, done), func(e eventsv1.Event) bool {
			return e.Reason == kaov1.UpgradeBackupSkippedReason && strings.Contains(e.Note, kaov1.UpgradeWithoutBackupAnnotation+"="+version)
		}) {
			t.Errorf("no %s Event for the upgrade at %s", kaov1.UpgradeBackupSkippedReason, version)
		}
	}

	allow("v1.17.1")
	prev := kd.Status.LastRun.ID
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) { s.Components.Scheduler.Version = "v1.18.1" })
	done := waitForNextRun(t, kd, prev)
	check(done, "v1.17.1", []string{"karmada-scheduler:v1.17.1->v1.18.1"})
	want := containerizedVersions("v1.17.1")
	want["karmada-scheduler"] = "v1.18.1"
	checkDeploymentImages(t, client, ns, want)
	checkRolloutOrder(t, done, []string{"karmada-scheduler"})

	allow("v1.18.1")
	prev = done.Status.LastRun.ID
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) {
		s.Version = "v1.18.1"
		s.Components.Scheduler.Version = ""
	})
	done = waitForNextRun(t, kd, prev)
	// The scheduler is on v1.18.1 already, and the Kubernetes components do
	// not change with Karmada's version: neither moves.
	check(done, "v1.18.1", []string{
		"karmada-crds:v1.17.1->v1.18.1", "karmada-aggregated-apiserver:v1.17.1->v1.18.1",
		"karmada-webhook:v1.17.1->v1.18.1", "karmada-controller-manager:v1.17.1->v1.18.1",
	})
	checkDeploymentImages(t, client, ns, containerizedVersions("v1.18.1"))
	checkRolloutOrder(t, done, []string{"Karmada's CRDs", "karmada-aggregated-apiserver", "karmada-webhook", "karmada-controller-manager"})
	if done.Status.Version != "v1.18.1" {
		t.Errorf("status.version is %q after the upgrade, want v1.18.1", done.Status.Version)
	}
	return waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
}

// checkContainerizedUpgrade checks a finished upgrade run: it succeeded,
// status.upgrade lists the moves ("component:from->to") and its completion,
// and it took its etcd snapshot first.
func checkContainerizedUpgrade(t *testing.T, kd *kaov1.KarmadaDeployment, stateDir string, moves []string) {
	t.Helper()
	checkUpgradeRun(t, kd, moves)
	checkBackup(t, stateDir, kd)
}

// checkUpgradeRun checks a finished upgrade run: it succeeded, and
// status.upgrade lists the moves ("component:from->to") and its completion.
func checkUpgradeRun(t *testing.T, kd *kaov1.KarmadaDeployment, moves []string) {
	t.Helper()
	last := kd.Status.LastRun
	if last.Playbook != "upgrade.yml" || last.Result != kaov1.RunSucceeded {
		t.Fatalf("run %s: %s %s, want a successful upgrade.yml: %s (failed tasks %+v)", last.ID, last.Playbook, last.Result, last.Message, last.FailedTasks)
	}
	u := kd.Status.Upgrade
	if u == nil || u.RunID != last.ID || u.CompletionTime == nil {
		t.Fatalf("status.upgrade does not record run %s as complete: %+v", last.ID, u)
	}
	got := []string{}
	for _, c := range u.Components {
		got = append(got, c.Name+":"+strings.Join(c.From, "/")+"->"+c.To)
		if c.Name != "karmada-crds" && !slices.Equal(c.Hosts, []string{"host_cluster"}) {
			t.Errorf("status.upgrade moves %s on %v, want the host cluster", c.Name, c.Hosts)
		}
	}
	if !slices.Equal(got, moves) {
		t.Errorf("status.upgrade.components:\n got %v\nwant %v", got, moves)
	}
}

// checkDeploymentImages checks the image tag of each component's
// Deployment in the host cluster namespace.
func checkDeploymentImages(t *testing.T, client kubernetes.Interface, ns string, want map[string]string) {
	t.Helper()
	for name, v := range want {
		d, err := client.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("Deployment %s/%s: %v", ns, name, err)
			continue
		}
		if image := d.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(image, ":"+v) {
			t.Errorf("Deployment %s/%s runs %s, want version %s", ns, name, image, v)
		}
	}
}

// checkRolloutOrder reads the run's log and checks which upgrade plays did
// work on the host cluster, in order: each named play (by a part of its
// name) gave task results, and no other upgrade play did.
func checkRolloutOrder(t *testing.T, kd *kaov1.KarmadaDeployment, want []string) {
	t.Helper()
	play, worked := "", []string{}
	for _, l := range stampedLines(lastRunLog(t, kd)) {
		fields := strings.Fields(l.rest)
		if len(fields) == 0 {
			continue
		}
		switch status := fields[0]; {
		case status == "play":
			play = strings.TrimSpace(strings.TrimPrefix(l.rest, "play"))
		case strings.HasPrefix(play, "Upgrade |") && (status == "ok" || status == "changed") &&
			len(fields) > 1 && fields[1] == "host_cluster" && (len(worked) == 0 || worked[len(worked)-1] != play):
			worked = append(worked, play)
		}
	}
	if len(worked) != len(want) {
		t.Fatalf("upgrade plays that worked on the host cluster: %q, want one per %q", worked, want)
	}
	for i, w := range want {
		if !strings.Contains(worked[i], w) {
			t.Errorf("upgrade play %d is %q, want %s's", i, worked[i], w)
		}
	}
}

// containerizedVersions are the versions of a Containerized control
// plane's components when Karmada's run karmada.
func containerizedVersions(karmada string) map[string]string {
	return map[string]string{
		"karmada-apiserver": "v1.35.4", "kube-controller-manager": "v1.35.4",
		"karmada-aggregated-apiserver": karmada, "karmada-controller-manager": karmada,
		"karmada-scheduler": karmada, "karmada-webhook": karmada,
	}
}
