package pipeline

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
)

// IndexField indexes the objects of one kind by a string field, such as
// spec.deploymentName, for client.MatchingFields.
func IndexField[T client.Object](mgr ctrl.Manager, obj T, field string, value func(T) string) error {
	err := mgr.GetFieldIndexer().IndexField(context.Background(), obj, field,
		func(o client.Object) []string { return []string{value(o.(T))} })
	if err != nil {
		return fmt.Errorf("indexing %T by %s: %w", obj, field, err)
	}
	return nil
}

// ObjectsNaming maps an object to reconcile requests for the objects of
// the listed kind, in its namespace, whose indexed field names it: the
// EtcdBackups of a KarmadaDeployment, the EtcdRestores of an EtcdBackup.
func ObjectsNaming(c client.Client, newList func() client.ObjectList, index string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []ctrl.Request {
		list := newList()
		if err := c.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the objects that name an object", "kind", fmt.Sprintf("%T", list), "index", index, "object", klog.KObj(o))
			return nil
		}
		var out []ctrl.Request
		_ = meta.EachListItem(list, func(item runtime.Object) error {
			if named, ok := item.(client.Object); ok {
				out = append(out, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(named)})
			}
			return nil
		})
		return out
	}
}
