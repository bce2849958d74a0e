package jobexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kao-io/kao/internal/runner"
)

// Labels and annotations of a run's Job, pod and Secret.
const (
	// RunIDLabel names the run.
	RunIDLabel = "kao.io/run-id"
	// OwnerUIDLabel is the UID of the object the run is for.
	OwnerUIDLabel = "kao.io/owner-uid"
	// componentLabel marks kao's run Jobs, their pods and Secrets.
	componentLabel = "app.kubernetes.io/component"
	componentValue = "kao-run"
	// metaAnnotation keeps the run's runner.Spec.Meta, as JSON.
	metaAnnotation = "kao.io/run-meta"
	// startAnnotation keeps when the run started, RFC 3339.
	startAnnotation = "kao.io/run-start"
	// requestKey is the Secret's key, and the file the pod reads.
	requestKey = "request.json"
	// RequestPath is where the pod finds its request.
	RequestPath = "/var/run/kao-run/" + requestKey
	// containerName is the run container's name.
	containerName = "run"
)

// maxRequestBytes keeps a request under the API server's limit for a Secret
// (1 MiB), with room for its metadata.
const maxRequestBytes = 900 << 10

// deadlineMargin is what a Job gets beyond the run's own timeout, which the
// pod enforces itself and reports: the deadline only catches a pod that
// could not.
const deadlineMargin = 2 * time.Minute

// pollInterval is how often the executor looks at a run's pod while it
// waits for it to start, or to end after its stream broke.
const pollInterval = time.Second

// Executor runs playbooks as Jobs. Its Run has the signature of
// runner.Run.
type Executor struct {
	// Client writes Jobs and Secrets.
	Client client.Client
	// Reader reads Jobs and pods without a cache, so the operator does not
	// watch every pod of the cluster.
	Reader client.Reader
	// Clientset streams the pods' logs.
	Clientset kubernetes.Interface
	// Image is the operator's own image, which the run's pod runs.
	Image string
	// PullPolicy is the image's pull policy.
	PullPolicy corev1.PullPolicy
	// PullSecrets are the image's pull Secrets; they must exist in every
	// namespace runs take place in.
	PullSecrets []corev1.LocalObjectReference
	// Resources are the run container's requests and limits.
	Resources corev1.ResourceRequirements
	// StateDir is the operator's --state-dir: the pod has an empty
	// directory there, so that the paths the run was prepared with hold.
	StateDir string
	// UID and GID are the user the pod runs as (the image's).
	UID, GID int64
}

// JobName is the name of a run's Job and of its Secret.
func JobName(runID string) string { return "kao-run-" + strings.ToLower(runID) }

// Run runs spec as a Job and follows it to its end; with spec.Attach it
// follows the Job an earlier operator process started. A run cancelled
// because the operator stops (context cause runner.ErrStopping) is left
// running and reported Detached; any other cancellation deletes the Job.
func (e *Executor) Run(ctx context.Context, spec runner.Spec) (*runner.Result, error) {
	if spec.Owner.UID == "" || spec.Owner.Namespace == "" {
		return nil, fmt.Errorf("run %s has no owner to run its Job beside", spec.ID)
	}
	start := time.Now()
	job := &batchv1.Job{}
	if spec.Attach {
		found, err := e.find(ctx, spec.Owner, spec.ID)
		if err != nil {
			return nil, err
		}
		if found == nil {
			return nil, fmt.Errorf("run %s: %w", spec.ID, ErrNoJob)
		}
		job = found
		if t, err := time.Parse(time.RFC3339, job.Annotations[startAnnotation]); err == nil {
			start = t
		}
	} else {
		var err error
		if job, err = e.start(ctx, spec, start); err != nil {
			return nil, err
		}
	}
	res := e.follow(ctx, spec, job, start)
	if res.Outcome != runner.Detached {
		e.remove(job)
	}
	return res, nil
}

// ErrNoJob is the error of a run to attach to whose Job is gone.
var ErrNoJob = errors.New("no Job of the run exists")

// Find looks for the Job of a run an earlier process started, and returns
// the meta data the run started with.
func (e *Executor) Find(ctx context.Context, owner runner.Owner, runID string) (map[string]string, bool, error) {
	job, err := e.find(ctx, owner, runID)
	if err != nil || job == nil {
		return nil, false, err
	}
	meta := map[string]string{}
	if raw := job.Annotations[metaAnnotation]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &meta); err != nil {
			return nil, false, fmt.Errorf("the meta data of Job %s: %w", job.Name, err)
		}
	}
	return meta, true, nil
}

func (e *Executor) find(ctx context.Context, owner runner.Owner, runID string) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	err := e.Reader.Get(ctx, types.NamespacedName{Namespace: owner.Namespace, Name: JobName(runID)}, job)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the Job of run %s: %w", runID, err)
	case job.Labels[OwnerUIDLabel] != owner.UID || job.Labels[RunIDLabel] != runID:
		return nil, nil
	case job.DeletionTimestamp != nil:
		return nil, nil
	}
	return job, nil
}

// start creates the run's Job, then its Secret, owned by the Job so that
// both go together. The pod waits for its Secret volume.
func (e *Executor) start(ctx context.Context, spec runner.Spec, start time.Time) (*batchv1.Job, error) {
	data, err := json.Marshal(requestOf(spec))
	if err != nil {
		return nil, fmt.Errorf("encoding the run's request: %w", err)
	}
	if len(data) > maxRequestBytes {
		return nil, fmt.Errorf("the run's inventory, variables, keys and files take %d KiB, more than the %d KiB a Job's Secret carries; "+
			"run this deployment with the in-process executor", len(data)>>10, maxRequestBytes>>10)
	}
	meta, err := json.Marshal(spec.Meta)
	if err != nil {
		return nil, fmt.Errorf("encoding the run's meta data: %w", err)
	}
	job := e.job(spec.ID, spec.Owner, []string{"run", "--request=" + RequestPath}, spec.Timeout, string(meta), start)
	return job, e.create(ctx, job, data)
}

// create creates a Job, then the Secret of its request, owned by the Job so
// that both go together. The pod waits for its Secret volume.
func (e *Executor) create(ctx context.Context, job *batchv1.Job, request []byte) error {
	if err := e.Client.Create(ctx, job); err != nil {
		return fmt.Errorf("creating the run's Job: %w", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: job.Name, Namespace: job.Namespace, Labels: job.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID,
				BlockOwnerDeletion: ptr.To(true)}},
		},
		Type:      corev1.SecretTypeOpaque,
		Immutable: ptr.To(true),
		Data:      map[string][]byte{requestKey: request},
	}
	if err := e.Client.Create(ctx, secret); err != nil {
		e.remove(job)
		return fmt.Errorf("creating the run's Secret: %w", err)
	}
	return nil
}

// job is the Job of a run (or task) id for owner, whose pod runs the
// operator's image with args: one pod, never retried, without a service
// account token, with the operator image's user and an empty state
// directory.
func (e *Executor) job(id string, owner runner.Owner, args []string, timeout time.Duration, meta string, start time.Time) *batchv1.Job {
	labels := map[string]string{RunIDLabel: id, OwnerUIDLabel: owner.UID, componentLabel: componentValue,
		"app.kubernetes.io/managed-by": "kao"}
	deadline := int64((timeout + deadlineMargin).Seconds())
	if timeout <= 0 {
		deadline = int64((24 * time.Hour).Seconds())
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: JobName(id), Namespace: owner.Namespace, Labels: labels,
			Annotations: map[string]string{metaAnnotation: meta, startAnnotation: start.UTC().Format(time.RFC3339)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: owner.APIVersion, Kind: owner.Kind,
				Name: owner.Name, UID: types.UID(owner.UID)}},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](0),
			ActiveDeadlineSeconds: ptr.To(deadline),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					ImagePullSecrets:              e.PullSecrets,
					TerminationGracePeriodSeconds: ptr.To[int64](30),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(e.UID), RunAsGroup: ptr.To(e.GID), FSGroup: ptr.To(e.GID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:            containerName,
						Image:           e.Image,
						ImagePullPolicy: e.PullPolicy,
						Args:            args,
						Resources:       e.Resources,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "request", MountPath: filepath.Dir(RequestPath), ReadOnly: true},
							{Name: "state", MountPath: e.StateDir},
							{Name: "tmp", MountPath: "/tmp"},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "request", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
							SecretName: JobName(id), DefaultMode: ptr.To[int32](0o440)}}},
						{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					},
				},
			},
		},
	}
}

// remove deletes the run's Secret and its Job with its pod. It runs after
// the run's context may have ended.
func (e *Executor) remove(job *batchv1.Job) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: job.Namespace}}
	_ = client.IgnoreNotFound(e.Client.Delete(ctx, secret))
	_ = client.IgnoreNotFound(e.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)))
}
