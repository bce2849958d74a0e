package jobexec

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kao-io/kao/internal/runner"
)

// TestATaskIsAJobWhoseEndIsReadFromItsPod: a task's Job runs the command
// with the request from its Secret, under the same rules as a run's; its
// state comes from its pod's termination message (this API server has no
// kubelet: the test writes the pod's status as one would), or from the
// Job's failure; RemoveTask deletes the Job and its Secret.
func TestATaskIsAJobWhoseEndIsReadFromItsPod(t *testing.T) {
	e, c, ns := newExecutor(t)
	ctx := context.Background()
	owner := runner.Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "owner", UID: "0b5e5d6a-0000-4000-8000-000000000002"}
	task := Task{ID: "snap-1", Owner: owner, Command: "snapshot", Request: []byte(`{"name":"x.db"}`), Timeout: time.Hour}
	if err := e.StartTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: JobName(task.ID)}, job); err != nil {
		t.Fatal(err)
	}
	pod := job.Spec.Template.Spec
	if args := pod.Containers[0].Args; len(args) != 2 || args[0] != "snapshot" || args[1] != "--request="+RequestPath {
		t.Errorf("the task's command: %v", args)
	}
	if *pod.AutomountServiceAccountToken || *job.Spec.BackoffLimit != 0 || *job.Spec.ActiveDeadlineSeconds != int64((time.Hour+deadlineMargin).Seconds()) ||
		job.OwnerReferences[0].UID != "0b5e5d6a-0000-4000-8000-000000000002" {
		t.Errorf("the task's Job breaks a run Job's rules: %+v", job.Spec)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: JobName(task.ID)}, secret); err != nil || string(secret.Data[requestKey]) != string(task.Request) {
		t.Fatalf("the task's Secret: %v %q", err, secret.Data[requestKey])
	}

	st, found, err := e.TaskState(ctx, owner, task.ID)
	if err != nil || !found || st.Done {
		t.Fatalf("a task whose pod has not started: %+v %v %v", st, found, err)
	}
	if _, found, _ := e.TaskState(ctx, runner.Owner{Namespace: ns, UID: "another"}, task.ID); found {
		t.Error("another owner's task was found")
	}

	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: JobName(task.ID) + "-abcde", Namespace: ns, Labels: map[string]string{RunIDLabel: task.ID}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: containerName, Image: e.Image}}},
	}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: containerName,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", Message: `{"snapshot":{}}`}}}}}
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	if st, _, err := e.TaskState(ctx, owner, task.ID); err != nil || !st.Done || !st.Succeeded || st.Result != `{"snapshot":{}}` {
		t.Errorf("a task whose pod succeeded: %+v %v", st, err)
	}
	p.Status.ContainerStatuses[0].State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: `{"error":"no"}`}
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := e.TaskState(ctx, owner, task.ID); !st.Done || st.Succeeded || st.Result != `{"error":"no"}` || !strings.Contains(st.Problem, "exit code 1") {
		t.Errorf("a task whose pod failed: %+v", st)
	}
	if err := c.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}

	job.Status.StartTime = &metav1.Time{Time: time.Now()}
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, LastTransitionTime: metav1.Now()},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, LastTransitionTime: metav1.Now()},
	}
	if err := c.Status().Update(ctx, job); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := e.TaskState(ctx, owner, task.ID); !st.Done || st.Succeeded || !strings.Contains(st.Problem, "passed its deadline") {
		t.Errorf("a task whose Job passed its deadline: %+v", st)
	}

	if err := e.RemoveTask(ctx, owner, task.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the task's Secret after RemoveTask: %v", err)
	}
	gone := &batchv1.Job{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(job), gone); err == nil && gone.DeletionTimestamp == nil {
		t.Error("the task's Job is still there after RemoveTask")
	}
	if _, found, _ := e.TaskState(ctx, owner, task.ID); found {
		t.Error("a removed task is still found")
	}
}
