package karmadadeployment

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/kubeconfig"
	"github.com/kao-io/kao/internal/pki"
)

// TestTheExportedKubeconfigFollowsTheEndpoint proves that the admin
// kubeconfig kao exports follows the endpoint when a host dies for good
// (docs/disaster-recovery.md): without spec.apiServer.endpoint it is the
// first apiServer host of the spec, and once that host is removed from
// spec.hosts the next export names the next one, in the same Secret. With
// an endpoint in the spec (a load balancer), removing a host changes
// nothing.
func TestTheExportedKubeconfigFollowsTheEndpoint(t *testing.T) {
	controllertest.RequireEnv(t)
	ctx := context.Background()
	kd := controllertest.SampleDeployment(t, "kao_v1alpha1_karmadadeployment_binary.yaml")
	kd.Namespace = controllertest.NewNamespace(t)
	kd.Spec.APIServer.Endpoint = ""
	bundle, _, _, err := pki.Ensure(nil, pki.Request{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: controllertest.K8s, APIReader: controllertest.K8s}
	server := func() string {
		t.Helper()
		if err := r.exportKubeconfig(ctx, kd, bundle); err != nil {
			t.Fatal(err)
		}
		ref := kd.Status.KubeconfigSecretRef
		secret := &corev1.Secret{}
		if err := controllertest.K8s.Get(ctx, types.NamespacedName{Namespace: kd.Namespace, Name: ref.Name}, secret); err != nil {
			t.Fatal(err)
		}
		// Read as kao reads any kubeconfig: what it exports is minimal.
		m, err := kubeconfig.Minimize(secret.Data[ref.Key], "")
		if err != nil {
			t.Fatalf("the exported kubeconfig: %v", err)
		}
		return m.Server
	}

	if got := server(); got != "https://192.0.2.11:5443" {
		t.Fatalf("the kubeconfig names %s, want the first apiServer host, cp-1", got)
	}
	// cp-1 dies for good and leaves the spec.
	kd.Spec.Hosts = slices.DeleteFunc(kd.Spec.Hosts, func(h kaov1.Host) bool { return h.Name == "cp-1" })
	kd.Spec.LostHosts = []string{"cp-1"}
	if got := server(); got != "https://192.0.2.12:5443" {
		t.Errorf("after cp-1 left the spec the kubeconfig names %s, want cp-2's address", got)
	}
	// Behind a load balancer the endpoint is the spec's, whatever hosts go.
	kd.Spec.APIServer.Endpoint = "192.0.2.10:5443"
	kd.Spec.Hosts = slices.DeleteFunc(kd.Spec.Hosts, func(h kaov1.Host) bool { return h.Name == "cp-2" })
	if got := server(); got != "https://192.0.2.10:5443" {
		t.Errorf("with spec.apiServer.endpoint the kubeconfig names %s", got)
	}
}
