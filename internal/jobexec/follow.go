package jobexec

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kao-io/kao/internal/runner"
)

// follow streams the log of the run's pod into runner.Follow until the
// run's end record, reading it again from its start when the stream breaks
// while the pod still runs. Without an end record the Job's and the pod's
// state say why.
func (e *Executor) follow(ctx context.Context, spec runner.Spec, job *batchv1.Job, start time.Time) *runner.Result {
	for {
		pod, why, err := e.awaitPod(ctx, job)
		if err != nil {
			return e.stopped(ctx, spec, start, err)
		}
		if pod == nil {
			return ended(spec, start, why)
		}
		stream, err := e.Clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name,
			&corev1.PodLogOptions{Container: containerName, Follow: true}).Stream(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return e.stopped(ctx, spec, start, ctx.Err())
			}
			if err := sleep(ctx, pollInterval); err != nil {
				return e.stopped(ctx, spec, start, err)
			}
			continue
		}
		res, done, err := runner.Follow(spec, start, stream)
		_ = stream.Close()
		if err != nil {
			return ended(spec, start, "following the run's pod failed: "+err.Error())
		}
		if done {
			return res
		}
		if ctx.Err() != nil {
			return e.stopped(ctx, spec, start, ctx.Err())
		}
		// The stream ended without the run's end: the pod ended, or the
		// stream broke. Look at the pod again.
		if reason := e.podEnded(ctx, job); reason != "" {
			res.Message = reason
			return res
		}
		if err := sleep(ctx, pollInterval); err != nil {
			return e.stopped(ctx, spec, start, err)
		}
	}
}

// awaitPod waits until the run's pod has started its container (or ended),
// and returns it; or nil with the reason the run cannot take place.
func (e *Executor) awaitPod(ctx context.Context, job *batchv1.Job) (*corev1.Pod, string, error) {
	for {
		if reason := e.jobFailed(ctx, job); reason != "" {
			return nil, reason, nil
		}
		pods := &corev1.PodList{}
		if err := e.Reader.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{RunIDLabel: job.Labels[RunIDLabel]}); err != nil && ctx.Err() == nil {
			return nil, "", fmt.Errorf("listing the run's pod: %w", err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.Phase != corev1.PodPending {
				return p, "", nil
			}
			if why := waitingTrouble(p); why != "" {
				return nil, why, nil
			}
		}
		if err := sleep(ctx, pollInterval); err != nil {
			return nil, "", err
		}
	}
}

// waitingTrouble names what keeps a pending pod from ever running: an image
// that cannot be pulled, a configuration the kubelet rejects.
func waitingTrouble(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError":
				return fmt.Sprintf("the run's pod %s cannot start: %s: %s", p.Name, w.Reason, runner.NewRedactor().Clean(w.Message, 300))
			}
		}
	}
	return ""
}

// jobFailed names why the Job failed (its deadline passed, its pod
// failed), or "".
func (e *Executor) jobFailed(ctx context.Context, job *batchv1.Job) string {
	cur := &batchv1.Job{}
	if err := e.Reader.Get(ctx, client.ObjectKeyFromObject(job), cur); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return "the run's Job " + job.Name + " was deleted"
		}
		return ""
	}
	for _, c := range cur.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			if c.Reason == batchv1.JobReasonDeadlineExceeded {
				return fmt.Sprintf("the run's Job %s passed its deadline of %ds and was stopped", job.Name, ptrValue(cur.Spec.ActiveDeadlineSeconds))
			}
			return fmt.Sprintf("the run's Job %s failed: %s: %s", job.Name, c.Reason, runner.NewRedactor().Clean(c.Message, 300))
		}
	}
	return ""
}

// podEnded says how the run's pod ended, when it has: the Job's failure,
// or the container's exit; "" while it runs.
func (e *Executor) podEnded(ctx context.Context, job *batchv1.Job) string {
	if reason := e.jobFailed(ctx, job); reason != "" {
		return reason
	}
	pods := &corev1.PodList{}
	if err := e.Reader.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{RunIDLabel: job.Labels[RunIDLabel]}); err != nil {
		return ""
	}
	if len(pods.Items) == 0 {
		return "the run's pod is gone, and the run's end was never seen"
	}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if t := s.State.Terminated; t != nil {
				return fmt.Sprintf("the run's pod %s ended without the run's result: %s, exit code %d", p.Name, t.Reason, t.ExitCode)
			}
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return fmt.Sprintf("the run's pod %s ended (%s) without the run's result: %s", p.Name, p.Status.Phase, p.Status.Reason)
		}
	}
	return ""
}

// stopped is the result of a run whose context ended: the operator stopping
// leaves the Job running for the next one; anything else cancels it.
func (e *Executor) stopped(ctx context.Context, spec runner.Spec, start time.Time, err error) *runner.Result {
	res := &runner.Result{ID: spec.ID, Playbook: filepath.Base(spec.Playbook), StartTime: start, EndTime: time.Now(), ExitCode: -1}
	switch {
	case errors.Is(context.Cause(ctx), runner.ErrStopping):
		res.Outcome, res.Message = runner.Detached, "the operator stopped; the run goes on in its Job"
	case ctx.Err() != nil:
		res.Outcome, res.Message = runner.Cancelled, "the run was cancelled"
	default:
		res.Outcome, res.Message = runner.Failed, runner.NewRedactor(spec.Redact...).Clean(err.Error(), 400)
	}
	return res
}

// ended is the result of a run that ended without its end record.
func ended(spec runner.Spec, start time.Time, why string) *runner.Result {
	return &runner.Result{ID: spec.ID, Playbook: filepath.Base(spec.Playbook), Outcome: runner.Failed, Message: why,
		StartTime: start, EndTime: time.Now(), ExitCode: -1}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func ptrValue(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
