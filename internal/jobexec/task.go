package jobexec

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kao-io/kao/internal/runner"
)

// A task is work of the operator other than a playbook that a Job's pod
// does, such as an etcd backup's snapshot: `kao-manager <command>
// --request=<file>`, with its request in the Job's Secret, as a run's. The
// operator does not follow a task's log. It looks at the Job when it
// reconciles the task's owner, and reads the task's result from the
// container's termination message, which the command writes as it ends; so
// a task, too, outlives the operator that started it.

// Task is a task to start.
type Task struct {
	// ID names the task; its Job and Secret are JobName(ID).
	ID string
	// Owner is the object the task is for; it owns the Job.
	Owner runner.Owner
	// Command is the kao-manager command the pod runs.
	Command string
	// Request is what the command reads, secret material included.
	Request []byte
	// Timeout is how long the command may take: the Job's deadline, with a
	// margin for the pod's start.
	Timeout time.Duration
}

// TaskState is what a task's Job says about it.
type TaskState struct {
	// Done is set once the task's pod ended, or its Job failed.
	Done bool
	// Succeeded is set when the command exited with 0.
	Succeeded bool
	// Result is what the command wrote as its termination message: its
	// result; empty when it wrote none.
	Result string
	// Problem says why a task that did not succeed ended, when the Job or the
	// pod tells (its deadline passed, the image cannot be pulled).
	Problem string
}

// TerminationMessageLimit is the most a task may write as its result: what
// the kubelet keeps of a termination message.
const TerminationMessageLimit = 4096

// TerminationMessagePath is where a task writes its result: the container's
// default termination message file.
const TerminationMessagePath = corev1.TerminationMessagePathDefault

// StartTask creates the task's Job and Secret.
func (e *Executor) StartTask(ctx context.Context, t Task) error {
	if t.Owner.UID == "" || t.Owner.Namespace == "" {
		return fmt.Errorf("task %s has no owner to run its Job beside", t.ID)
	}
	if len(t.Request) > maxRequestBytes {
		return fmt.Errorf("the request of task %s takes %d KiB, more than the %d KiB a Job's Secret carries", t.ID, len(t.Request)>>10, maxRequestBytes>>10)
	}
	job := e.job(t.ID, t.Owner, []string{t.Command, "--request=" + RequestPath}, t.Timeout, "{}", time.Now())
	return e.create(ctx, job, t.Request)
}

// TaskState looks at a task's Job and pod. found is false when the task's
// Job is gone (or belongs to another owner).
func (e *Executor) TaskState(ctx context.Context, owner runner.Owner, id string) (TaskState, bool, error) {
	job, err := e.find(ctx, owner, id)
	if err != nil || job == nil {
		return TaskState{}, false, err
	}
	pods := &corev1.PodList{}
	if err := e.Reader.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{RunIDLabel: id}); err != nil {
		return TaskState{}, true, fmt.Errorf("listing the pod of task %s: %w", id, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		for _, s := range p.Status.ContainerStatuses {
			if t := s.State.Terminated; s.Name == containerName && t != nil {
				st := TaskState{Done: true, Succeeded: t.ExitCode == 0, Result: t.Message}
				if !st.Succeeded {
					st.Problem = fmt.Sprintf("the task's pod %s ended: %s, exit code %d", p.Name, t.Reason, t.ExitCode)
				}
				return st, true, nil
			}
		}
		if p.Status.Phase == corev1.PodPending {
			if why := waitingTrouble(p); why != "" {
				return TaskState{Done: true, Problem: why}, true, nil
			}
		}
	}
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			why := fmt.Sprintf("the task's Job %s failed: %s: %s", job.Name, c.Reason, runner.NewRedactor().Clean(c.Message, 300))
			if c.Reason == batchv1.JobReasonDeadlineExceeded {
				why = fmt.Sprintf("the task's Job %s passed its deadline of %ds and was stopped", job.Name, ptrValue(job.Spec.ActiveDeadlineSeconds))
			}
			return TaskState{Done: true, Problem: why}, true, nil
		}
	}
	return TaskState{}, true, nil
}

// RemoveTask deletes a task's Job, its pod and its Secret.
func (e *Executor) RemoveTask(ctx context.Context, owner runner.Owner, id string) error {
	job, err := e.find(ctx, owner, id)
	if err != nil || job == nil {
		return err
	}
	e.remove(job)
	return nil
}
