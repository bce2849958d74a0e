package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

// stagedReconciler is the reconciler of a kind whose behaviour has not been
// built yet: it records the kind's conditions as Unknown with reason
// NotImplemented so users see plainly that nothing acts on the object.
type stagedReconciler[T client.Object] struct {
	client     client.Client
	newObject  func() T
	conditions func(T) *[]metav1.Condition
	types      []string
	message    string
	maxWorkers int
}

func (r *stagedReconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.newObject()
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	conds := r.conditions(obj)
	before := append([]metav1.Condition(nil), *conds...)
	setUnknownIfMissing(conds, obj.GetGeneration(), kaov1.NotImplementedReason, r.message, r.types...)
	if equality.Semantic.DeepEqual(before, *conds) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.client.Status().Update(ctx, obj)
}

func (r *stagedReconciler[T]) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(r.newObject()).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.maxWorkers}).
		Complete(r)
}

// +kubebuilder:rbac:groups=kao.io,resources=etcdrestores,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kao.io,resources=etcdrestores/status,verbs=get;update;patch

// SetupEtcdRestoreController registers the EtcdRestore reconciler. Restores
// arrive with the etcd lifecycle work; until then it only reports NotImplemented.
func SetupEtcdRestoreController(mgr ctrl.Manager, maxWorkers int) error {
	r := &stagedReconciler[*kaov1.EtcdRestore]{
		client:     mgr.GetClient(),
		newObject:  func() *kaov1.EtcdRestore { return &kaov1.EtcdRestore{} },
		conditions: func(o *kaov1.EtcdRestore) *[]metav1.Condition { return &o.Status.Conditions },
		types:      []string{kaov1.ReadyCondition, kaov1.RestoreSucceededCondition},
		message:    "kao does not restore etcd snapshots yet",
		maxWorkers: maxWorkers,
	}
	return r.setup(mgr)
}
