package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/kubeconfig"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/runner"
)

// Gatherer reads what runs need, for all three kinds: Secrets (SSH key,
// known_hosts, member kubeconfigs, PKI, external etcd), the host cluster,
// and the artifacts bundle; and it assembles a run's spec from them.
type Gatherer struct {
	// Client reads through the cache.
	Client client.Client
	// APIReader reads Secrets, which kao may not list or cache.
	APIReader client.Reader
	// InClusterConfig reaches the operator's own cluster.
	InClusterConfig *rest.Config
	// Options are the operator's settings.
	Options
}

// Inputs is the secret material a run needs, read from Secrets.
type Inputs struct {
	// SSHKey is spec.ssh's private key; KnownHosts pins the hosts' keys.
	SSHKey     []byte
	KnownHosts []byte
	// Kubeconfigs holds member kubeconfigs by member name: each one a
	// minimal kubeconfig kao wrote (kubeconfig.Minimize), never the user's.
	Kubeconfigs map[string][]byte
	// KubeconfigSecrets are the members' credentials, for redaction.
	KubeconfigSecrets [][]byte
	// PKI holds the deployment's certificates and keys.
	PKI pki.Bundle
	// ExternalEtcd is spec.etcd.external's CA and client certificate.
	ExternalEtcd *externalEtcd
	// UpgradeGroups are what an upgrade run moves: the inventory's upgrade
	// groups, by group name; nil for any other run.
	UpgradeGroups map[string][]string
	// Host is the host cluster of a Containerized deployment.
	Host *HostCluster
}

// secretValue reads one key of a Secret in the deployment's namespace. field
// is the spec path of the reference, for the error message.
func (g *Gatherer) secretValue(ctx context.Context, ns string, ref kaov1.SecretKeyReference, field string) ([]byte, error) {
	secret := &corev1.Secret{}
	if err := g.APIReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, reason.SecretMissing("Secret %s/%s named in %s does not exist", ns, ref.Name, field)
		}
		return nil, fmt.Errorf("reading Secret %s/%s: %w", ns, ref.Name, err)
	}
	data, ok := secret.Data[ref.Key]
	if !ok || len(data) == 0 {
		return nil, reason.SecretMissing("Secret %s/%s has no key %q named in %s", ns, ref.Name, ref.Key, field)
	}
	return data, nil
}

// GatherInputs reads every Secret a run of this deployment needs.
func (g *Gatherer) GatherInputs(ctx context.Context, kd *kaov1.KarmadaDeployment) (*Inputs, error) {
	in := &Inputs{Kubeconfigs: map[string][]byte{}}
	if err := g.checkTakeOver(ctx, kd); err != nil {
		return nil, err
	}
	var err error
	if ssh := kd.Spec.SSH; ssh != nil {
		if in.SSHKey, err = g.secretValue(ctx, kd.Namespace, ssh.PrivateKeySecretRef, "spec.ssh.privateKeySecretRef"); err != nil {
			return nil, err
		}
		if in.KnownHosts, err = g.secretValue(ctx, kd.Namespace, ssh.KnownHostsSecretRef, "spec.ssh.knownHostsSecretRef"); err != nil {
			return nil, err
		}
		if err := checkSSHKey(in.SSHKey, kd.Namespace, ssh.PrivateKeySecretRef); err != nil {
			return nil, err
		}
		if err := checkKnownHosts(in.KnownHosts, kd.Spec.Hosts, kd.Namespace, ssh.KnownHostsSecretRef, scratchDir(g.StateDir)); err != nil {
			return nil, err
		}
	}
	if in.ExternalEtcd, err = g.ReadExternalEtcd(ctx, kd); err != nil {
		return nil, err
	}
	// A deployment being deleted revokes Karmada's access in each member it
	// has a kubeconfig for (the uninstall fails, naming the member, for one
	// it has not); with kao.io/members-gone it needs none.
	deleting := !kd.DeletionTimestamp.IsZero()
	if deleting && kd.Annotations[kaov1.MembersGoneAnnotation] == "true" {
		return in, nil
	}
	inSpec := map[string]bool{}
	for i, m := range kd.Spec.Members {
		inSpec[m.Name] = true
		min, err := g.memberKubeconfig(ctx, kd, m.KubeconfigSecretRef, m.Context, i)
		switch {
		case err == nil:
			in.addKubeconfig(m.Name, min)
		case !deleting:
			return nil, err
		}
	}
	// Members leaving spec.members are cleaned up with the kubeconfig they
	// joined with, checked like any other; without it (the Secret is gone)
	// only Karmada's side is.
	for _, m := range kd.Status.Members {
		if inSpec[m.Name] || m.KubeconfigSecretRef == nil {
			continue
		}
		min, err := g.memberKubeconfig(ctx, kd, *m.KubeconfigSecretRef, "", -1)
		switch {
		case err == nil:
			in.addKubeconfig(m.Name, min)
		case deleting || errors.Is(err, reason.ErrSecretMissing):
		default:
			return nil, err
		}
	}
	return in, nil
}

// checkTakeOver refuses kao.io/take-over-from naming a deployment that
// still exists: only what a deleted deployment left may be taken over.
// (The owner markers and claims further refuse one of another namespace.)
func (g *Gatherer) checkTakeOver(ctx context.Context, kd *kaov1.KarmadaDeployment) error {
	uid := kd.Annotations[kaov1.TakeOverFromAnnotation]
	if uid == "" {
		return nil
	}
	all := &kaov1.KarmadaDeploymentList{}
	if err := g.Client.List(ctx, all); err != nil {
		return fmt.Errorf("listing KarmadaDeployments: %w", err)
	}
	for _, other := range all.Items {
		if string(other.UID) == uid {
			return reason.Missing("%s names a KarmadaDeployment that still exists: only what a deleted deployment left can be taken over",
				kaov1.TakeOverFromAnnotation)
		}
	}
	return nil
}

// memberKubeconfig reads and minimizes a member's kubeconfig: spec.members[i]'s,
// or with i < 0 the one status.members recorded for a member that left.
func (g *Gatherer) memberKubeconfig(ctx context.Context, kd *kaov1.KarmadaDeployment, ref kaov1.SecretKeyReference, context string, i int) (*kubeconfig.Minimal, error) {
	field := "status.members"
	if i >= 0 {
		field = fmt.Sprintf("spec.members[%d].kubeconfigSecretRef", i)
	}
	data, err := g.secretValue(ctx, kd.Namespace, ref, field)
	if err != nil {
		return nil, err
	}
	min, err := kubeconfig.Minimize(data, context)
	if err != nil {
		from := "its current-context"
		switch {
		case i >= 0 && context != "":
			from = fmt.Sprintf("spec.members[%d].context", i)
		case i >= 0:
			from = fmt.Sprintf("its current-context; name another in spec.members[%d].context", i)
		}
		return nil, reason.Missing("Secret %s/%s key %q named in %s: %v (context from %s)",
			kd.Namespace, ref.Name, ref.Key, field, err, from)
	}
	return min, nil
}

// addKubeconfig keeps a member's minimal kubeconfig for the run, and its
// credentials for redaction.
func (in *Inputs) addKubeconfig(member string, min *kubeconfig.Minimal) {
	in.Kubeconfigs[member] = min.Data
	in.KubeconfigSecrets = append(in.KubeconfigSecrets, min.Secrets...)
}

// secretValues lists every secret value of the inputs, for redaction.
func (in *Inputs) secretValues() [][]byte {
	out := [][]byte{}
	if in.SSHKey != nil {
		out = append(out, in.SSHKey)
	}
	out = append(out, in.KubeconfigSecrets...)
	for _, name := range SortedKeys(in.PKI) {
		if strings.HasSuffix(name, ".key") {
			out = append(out, in.PKI[name])
		}
	}
	if in.Host != nil {
		out = append(out, in.Host.Secrets...)
	}
	return out
}

// SortedKeys lists a map's keys in order, for output that never changes
// with map iteration.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sortedHostNames(m map[string]runner.HostStats) []string { return SortedKeys(m) }

func secondsDuration(s int32) time.Duration { return time.Duration(s) * time.Second }
