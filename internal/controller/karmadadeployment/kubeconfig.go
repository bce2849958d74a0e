package karmadadeployment

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/pki"
)

// KubeconfigKey is the key of the exported admin kubeconfig in its Secret.
const KubeconfigKey = "kubeconfig"

// kubeconfigSecretName names the Secret holding a deployment's admin kubeconfig.
func kubeconfigSecretName(kd *kaov1.KarmadaDeployment) string {
	return pipeline.TruncateString(kd.Name, 242) + "-kubeconfig"
}

// exportKubeconfig keeps an admin kubeconfig for karmada-apiserver, whose
// server is the deployment's endpoint, in a Secret owned by the deployment,
// and points status.kubeconfigSecretRef at it.
func (r *Reconciler) exportKubeconfig(ctx context.Context, kd *kaov1.KarmadaDeployment, bundle pki.Bundle) error {
	endpoint := pipeline.APIEndpoint(kd)
	if endpoint == "" {
		return nil
	}
	data, err := bundle.Kubeconfig("admin-client", "https://"+endpoint)
	if err != nil {
		return fmt.Errorf("rendering the admin kubeconfig: %w", err)
	}
	key := types.NamespacedName{Namespace: kd.Namespace, Name: kubeconfigSecretName(kd)}
	secret := &corev1.Secret{}
	err = r.APIReader.Get(ctx, key, secret)
	switch {
	case apierrors.IsNotFound(err):
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{KubeconfigKey: data},
		}
		if err := claimSecret(secret, kd, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, secret); err != nil {
			return fmt.Errorf("creating Secret %s: %w", key, err)
		}
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", key, err)
	default:
		stale, err := pipeline.OwnedByAnother(secret, kd)
		if err != nil {
			return err
		}
		if bytes.Equal(secret.Data[KubeconfigKey], data) && !stale {
			break
		}
		secret.Data = map[string][]byte{KubeconfigKey: data}
		if err := claimSecret(secret, kd, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.Client.Update(ctx, secret); err != nil {
			return fmt.Errorf("updating Secret %s: %w", key, err)
		}
	}
	kd.Status.KubeconfigSecretRef = &kaov1.SecretKeyReference{Name: key.Name, Key: KubeconfigKey}
	return nil
}

// claimSecret labels a Secret with the deployment's UID and makes the
// deployment its controller, in place of any other KarmadaDeployment (a
// deleted one of the same name), so the garbage collector keeps it for as
// long as this deployment lives.
func claimSecret(secret *corev1.Secret, kd *kaov1.KarmadaDeployment, scheme *runtime.Scheme) error {
	if secret.Labels == nil {
		secret.Labels = map[string]string{}
	}
	secret.Labels[kaov1.DeploymentUIDLabel] = string(kd.UID)
	refs := secret.OwnerReferences[:0]
	for _, ref := range secret.OwnerReferences {
		if ref.Kind != "KarmadaDeployment" || !strings.HasPrefix(ref.APIVersion, kaov1.GroupVersion.Group+"/") || ref.UID == kd.UID {
			refs = append(refs, ref)
		}
	}
	secret.OwnerReferences = refs
	return controllerutil.SetControllerReference(kd, secret, scheme)
}
