package status

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

func deploymentStatus(kd *kaov1.KarmadaDeployment) any { return kd.Status }

func newClient(t *testing.T, patches *int, objs ...client.Object) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := kaov1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(objs...).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			*patches++
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		}}).Build()
}

func TestPatchWritesOnlyAChange(t *testing.T) {
	ctx := context.Background()
	kd := &kaov1.KarmadaDeployment{ObjectMeta: metav1.ObjectMeta{Name: "dc1", Namespace: "ns"}}
	patches := 0
	c := newClient(t, &patches, kd)
	if err := c.Get(ctx, client.ObjectKeyFromObject(kd), kd); err != nil {
		t.Fatal(err)
	}
	p := NewPatcher(c, kd, deploymentStatus, true)
	if err := p.Patch(ctx); err != nil || patches != 0 {
		t.Fatalf("no change: %d patches, %v", patches, err)
	}
	kd.Status.Phase = kaov1.PendingPhase
	if err := p.Patch(ctx); err != nil || patches != 1 {
		t.Fatalf("a change: %d patches, %v", patches, err)
	}
	if err := p.Patch(ctx); err != nil || patches != 1 {
		t.Fatalf("the same change again: %d patches, %v", patches, err)
	}
	got := &kaov1.KarmadaDeployment{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(kd), got); err != nil || got.Status.Phase != kaov1.PendingPhase {
		t.Fatalf("stored phase %q, %v", got.Status.Phase, err)
	}
}

func TestOptimisticLockRefusesAStaleWrite(t *testing.T) {
	ctx := context.Background()
	kd := &kaov1.KarmadaDeployment{ObjectMeta: metav1.ObjectMeta{Name: "dc1", Namespace: "ns"}}
	patches := 0
	c := newClient(t, &patches, kd)
	for _, lock := range []bool{true, false} {
		stale := &kaov1.KarmadaDeployment{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(kd), stale); err != nil {
			t.Fatal(err)
		}
		// Another writer changes the object after this reconcile read it.
		other := stale.DeepCopy()
		other.Status.Version = "v1.18.1"
		if err := c.Status().Update(ctx, other); err != nil {
			t.Fatal(err)
		}
		p := NewPatcher(c, stale, deploymentStatus, lock)
		stale.Status.Phase = kaov1.RunningPhase
		err := p.Patch(ctx)
		if lock && err == nil {
			t.Error("with the lock, a write over a newer object succeeded")
		}
		if !lock && err != nil {
			t.Errorf("without the lock: %v", err)
		}
	}
}

func TestPatchOfAGoneObjectIsNoError(t *testing.T) {
	kd := &kaov1.KarmadaDeployment{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "ns"}}
	patches := 0
	p := NewPatcher(newClient(t, &patches), kd, deploymentStatus, false)
	kd.Status.Phase = kaov1.DegradedPhase
	if err := p.Patch(context.Background()); err != nil {
		t.Fatalf("patching a deleted object: %v", err)
	}
}
