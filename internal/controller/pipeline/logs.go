package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/runner"
)

// RunLogs keeps the logs of ended runs: a ConfigMap per run next to the
// deployment, and the run directories in the state directory, each down to
// the newest Retention.
type RunLogs struct {
	// Client writes the ConfigMaps; APIReader lists them.
	Client    client.Client
	APIReader client.Reader
	// StateDir holds the run directories.
	StateDir string
	// Retention is how many are kept; defaultLogRetention when zero.
	Retention int
}

// logConfigMapName names the ConfigMap holding one run's log.
func logConfigMapName(kd *kaov1.KarmadaDeployment, runID string) string {
	return TruncateString(kd.Name, 200) + "-run-" + runID
}

// storeRunLog keeps a run's compressed, redacted log tail in a ConfigMap owned
// by the deployment, and deletes the logs of older runs beyond the retention.
// Read it with:
//
//	kubectl get configmap NAME -o jsonpath='{.binaryData.ansible\.log\.gz}' | base64 -d | gunzip
func (r *RunLogs) storeRunLog(ctx context.Context, kd *kaov1.KarmadaDeployment, runID string, log []byte) (string, error) {
	data, err := runner.Gzip(log)
	for err == nil && len(data) > maxLogConfigMapBytes && len(log) > 1024 {
		log = log[len(log)/2:] // keep the newest half
		data, err = runner.Gzip(log)
	}
	if err != nil {
		return "", fmt.Errorf("compressing run log: %w", err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      logConfigMapName(kd, runID),
			Namespace: kd.Namespace,
			Labels:    map[string]string{kaov1.DeploymentUIDLabel: string(kd.UID), kaov1.RunIDLabel: runID},
		},
		BinaryData: map[string][]byte{kaov1.LogKey: data},
	}
	if err := controllerutil.SetControllerReference(kd, cm, r.Client.Scheme()); err != nil {
		return "", fmt.Errorf("owning run log ConfigMap: %w", err)
	}
	if err := r.Client.Create(ctx, cm); err != nil {
		return "", fmt.Errorf("creating run log ConfigMap %s: %w", cm.Name, err)
	}
	return cm.Name, r.pruneRunLogs(ctx, kd)
}

// pruneRunLogs deletes all but the newest LogRetention run logs of a deployment.
func (r *RunLogs) pruneRunLogs(ctx context.Context, kd *kaov1.KarmadaDeployment) error {
	list := &corev1.ConfigMapList{}
	if err := r.APIReader.List(ctx, list, client.InNamespace(kd.Namespace),
		client.MatchingLabels{kaov1.DeploymentUIDLabel: string(kd.UID)}); err != nil {
		return fmt.Errorf("listing run logs: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool {
		return list.Items[i].Labels[kaov1.RunIDLabel] < list.Items[j].Labels[kaov1.RunIDLabel]
	})
	var errs []error
	for i := 0; i < len(list.Items)-r.logRetention(); i++ {
		errs = append(errs, client.IgnoreNotFound(r.Client.Delete(ctx, &list.Items[i])))
	}
	return errors.Join(errs...)
}

func (r *RunLogs) logRetention() int {
	if r.Retention > 0 {
		return r.Retention
	}
	return defaultLogRetention
}

// KeepRunLog stores a finished run's log next to the deployment and prunes
// old run directories; failures are logged, never fatal to recording the
// run. It returns the log's ConfigMap name, empty when it was not stored.
func (r *RunLogs) KeepRunLog(ctx context.Context, log logr.Logger, kd *kaov1.KarmadaDeployment, runID string, data []byte) string {
	name, err := r.storeRunLog(ctx, kd, runID, data)
	if err != nil {
		log.Error(err, "Storing the run log")
	}
	if err := pruneRunDirs(RunsDir(r.StateDir, kd.UID), r.logRetention()); err != nil {
		log.Error(err, "Pruning old run directories")
	}
	return name
}
