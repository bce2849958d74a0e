package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/test/members"
)

// containerizedMember is the member cluster that joins the Containerized
// control plane for its estimator.
const containerizedMember = "edge"

// containerizedAddonWorkloads are the Deployments (and Secrets, and for all
// but karmada-descheduler Services) of the addons in the host cluster.
var containerizedAddonWorkloads = []string{"karmada-search", "karmada-metrics-adapter", "karmada-descheduler",
	"karmada-scheduler-estimator-" + containerizedMember}

// addonTarget is where containerizedAddons finds the control plane.
type addonTarget struct {
	client    kubernetes.Interface
	namespace string
	// memberAddress is where the member's API server listens: an address
	// of this machine that the estimator's pod reaches ("" is loopback).
	memberAddress string
	// schedulerLogs returns karmada-scheduler's log.
	schedulerLogs func() string
	// diagnose describes the pods' state for a failed run.
	diagnose func() string
}

// containerizedAddons joins a member and enables every addon of a running
// Containerized deployment in one spec change, as a platform team would,
// and checks what the user sees: the run succeeds; status lists each addon
// ready at Karmada's version; karmada-apiserver serves search.karmada.io and
// metrics.k8s.io through the host cluster's Services; karmada-scheduler runs
// with the estimator flags and connects to the member's estimator through
// karmada-apiserver's Service (its log says so only once the mutual-TLS
// gRPC connection is up). A second change disables every addon, and the
// run removes their workloads, Secrets, Services and registrations.
func containerizedAddons(t *testing.T, at addonTarget, kd *kaov1.KarmadaDeployment, kubectl func(args ...string) string) {
	ctx := context.Background()
	member := members.Start(t, 1, members.Options{Address: at.memberAddress})[0]
	createSecret(t, kd.Namespace, "edge-kubeconfig", map[string][]byte{"kubeconfig": member.Kubeconfig})

	start := time.Now()
	prev := get(t, kd).Status.LastRun.ID
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) {
		s.Members = append(s.Members, kaov1.MemberSpec{Name: containerizedMember, SyncMode: kaov1.PushSyncMode,
			KubeconfigSecretRef: kaov1.SecretKeyReference{Name: "edge-kubeconfig", Key: "kubeconfig"}})
		enableAddons(s)
	})
	enabled := waitForNextRun(t, kd, prev)
	if last := enabled.Status.LastRun; last.Result != kaov1.RunSucceeded {
		t.Fatalf("the run joining a member and enabling the addons failed: %+v\n%s", last, at.diagnose())
	}
	t.Logf("the run joining a member and enabling every addon took %s", time.Since(start).Round(time.Second))

	ready := waitForAddonsReady(t, kd)
	for _, name := range addonComponents {
		i := slices.IndexFunc(ready.Status.Components, func(c kaov1.ComponentStatus) bool { return c.Name == name })
		if i < 0 {
			t.Errorf("status.components does not list %s", name)
			continue
		}
		if c := ready.Status.Components[i]; !c.Ready || c.Version != "v1.18.1" {
			t.Errorf("%s: %+v; want ready at v1.18.1", name, c)
		}
	}

	// The workloads in the host cluster; karmada-scheduler calls the
	// estimators.
	for _, name := range containerizedAddonWorkloads {
		d, err := at.client.AppsV1().Deployments(at.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("the addon's Deployment: %v", err)
			continue
		}
		if d.Labels["kao.io/addon"] == "" || d.Status.ReadyReplicas < 1 {
			t.Errorf("Deployment %s: labels %v, %d replicas ready", name, d.Labels, d.Status.ReadyReplicas)
		}
	}
	sched, err := at.client.AppsV1().Deployments(at.namespace).Get(ctx, "karmada-scheduler", metav1.GetOptions{})
	if err != nil || !slices.Contains(sched.Spec.Template.Spec.Containers[0].Command, "--enable-scheduler-estimator=true") {
		t.Errorf("karmada-scheduler's Deployment does not call the estimators: %v", err)
	}

	// karmada-apiserver serves the addons' APIs through the host cluster's
	// Services, and finds the member's estimator through its own Service.
	if out := kubectl("get", "--raw", "/apis/search.karmada.io/v1alpha1"); !strings.Contains(out, "resourceregistries") {
		t.Errorf("search.karmada.io through karmada-apiserver: %s", out)
	}
	if out := kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1"); !strings.Contains(out, `"pods"`) {
		t.Errorf("metrics.k8s.io through karmada-apiserver: %s", out)
	}
	want := "karmada-scheduler-estimator-" + containerizedMember + "." + at.namespace + ".svc.cluster.local"
	if out := kubectl("get", "service", "-n", "karmada-system", "karmada-scheduler-estimator-"+containerizedMember,
		"-o", "jsonpath={.spec.type} {.spec.externalName}"); out != "ExternalName "+want {
		t.Errorf("the estimator's Service in karmada-apiserver is %q, want an ExternalName for %s", out, want)
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(2 * time.Second) {
		logs := at.schedulerLogs()
		if strings.Contains(logs, "of cluster("+containerizedMember+") has been established") {
			break
		}
		if time.Now().After(deadline) {
			lines := strings.Split(strings.TrimSpace(logs), "\n")
			t.Fatalf("karmada-scheduler did not connect to the estimator of %s within 3m; its last log lines:\n%s",
				containerizedMember, strings.Join(lines[max(0, len(lines)-15):], "\n"))
		}
	}

	// Disabling every addon removes what the run made for them.
	start = time.Now()
	updateSpec(t, kd, disableAddons)
	disabled := waitForNextRun(t, kd, enabled.Status.LastRun.ID)
	if last := disabled.Status.LastRun; last.Result != kaov1.RunSucceeded {
		t.Fatalf("the run disabling the addons failed: %+v", last)
	}
	t.Logf("the run disabling every addon took %s", time.Since(start).Round(time.Second))
	selector := metav1.ListOptions{LabelSelector: "kao.io/addon"}
	deployments, err := at.client.AppsV1().Deployments(at.namespace).List(ctx, selector)
	if err != nil {
		t.Fatal(err)
	}
	services, err := at.client.CoreV1().Services(at.namespace).List(ctx, selector)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := at.client.CoreV1().Secrets(at.namespace).List(ctx, selector)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(deployments.Items) + len(services.Items) + len(secrets.Items); n != 0 {
		t.Errorf("%d addon objects left in the host cluster after disabling the addons", n)
	}
	for _, name := range []string{"apiservice/v1alpha1.search.karmada.io", "apiservice/v1beta1.metrics.k8s.io"} {
		if out, err := karmadaKubectlErr(t, disabled, "get", name); err == nil || !strings.Contains(err.Error(), "NotFound") {
			t.Errorf("%s is still registered after disabling the addons: %v %s", name, err, out)
		}
	}
	if out := kubectl("get", "services", "-n", "karmada-system", "-l", "app.kubernetes.io/name=karmada-scheduler-estimator", "-o", "name"); out != "" {
		t.Errorf("the estimators' Services are left in karmada-apiserver: %s", out)
	}
	sched, err = at.client.AppsV1().Deployments(at.namespace).Get(ctx, "karmada-scheduler", metav1.GetOptions{})
	if err != nil || slices.Contains(sched.Spec.Template.Spec.Containers[0].Command, "--enable-scheduler-estimator=true") {
		t.Errorf("karmada-scheduler still calls the estimators: %v", err)
	}
	waitFor(t, 2*time.Minute, "status to forget the addons", func() bool {
		return !slices.ContainsFunc(get(t, kd).Status.Components, func(c kaov1.ComponentStatus) bool {
			return slices.Contains(addonComponents, c.Name)
		})
	})
	if _, err := at.client.CoreV1().Secrets(at.namespace).Get(ctx, "karmada-scheduler-estimator-"+containerizedMember+"-certs",
		metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the estimator's Secret with the member's credentials is still there: %v", err)
	}
}
