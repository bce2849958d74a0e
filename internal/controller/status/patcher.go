// Package status holds what kao's controllers share to write status: one
// patch per reconcile of what changed.
package status

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Patcher writes the status changes one reconcile made to an object in a
// single merge patch, as cluster-api's patch helper does: the reconcile
// changes the object freely, then calls Patch once (usually deferred).
type Patcher[T client.Object] struct {
	client client.Client
	obj    T
	base   T
	status func(T) any
	lock   bool
}

// NewPatcher remembers obj as read. status gives the object's status, the
// only part Patch compares. With optimisticLock the patch fails on a
// conflict, so a reconcile never overwrites status another writer changed
// since the read; without it the patch merges over whatever is there.
func NewPatcher[T client.Object](c client.Client, obj T, status func(T) any, optimisticLock bool) *Patcher[T] {
	return &Patcher[T]{client: c, obj: obj, base: obj.DeepCopyObject().(T), status: status, lock: optimisticLock}
}

// Patch writes the status if it changed since the read or the last Patch.
// An object that is gone is no error: there is no status left to write.
func (p *Patcher[T]) Patch(ctx context.Context) error {
	if equality.Semantic.DeepEqual(p.status(p.base), p.status(p.obj)) {
		return nil
	}
	patch := client.MergeFrom(p.base)
	if p.lock {
		patch = client.MergeFromWithOptions(p.base, client.MergeFromWithOptimisticLock{})
	}
	if err := p.client.Status().Patch(ctx, p.obj, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("patching status: %w", err)
	}
	p.base = p.obj.DeepCopyObject().(T)
	return nil
}
