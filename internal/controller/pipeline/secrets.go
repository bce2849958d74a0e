package pipeline

import (
	corev1 "k8s.io/api/core/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/reason"
)

// OwnedByAnother tells whether a Secret kao keeps for a deployment was made
// for another KarmadaDeployment of the same name, which was deleted (the
// garbage collector has not removed its Secrets yet): then the deployment
// takes it over as new. A Secret without kao's label is one a user made for
// the deployment to adopt. One owned by a deployment of another name (two
// long names that agree up to where kao cuts them) is an error: it is not
// this deployment's to take.
func OwnedByAnother(secret *corev1.Secret, kd *kaov1.KarmadaDeployment) (bool, error) {
	uid := secret.Labels[kaov1.DeploymentUIDLabel]
	if uid == "" || uid == string(kd.UID) {
		return false, nil
	}
	for _, ref := range secret.OwnerReferences {
		if ref.Kind == "KarmadaDeployment" && ref.Name != kd.Name {
			return false, reason.Missing("Secret %s/%s belongs to KarmadaDeployment %s: rename this deployment",
				secret.Namespace, secret.Name, ref.Name)
		}
	}
	return true, nil
}
