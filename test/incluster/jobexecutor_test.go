package incluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/jobexec"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/node"
)

// TestJobExecutor installs the chart with executor.type=job on a real node
// and checks, with real Job pods running ansible-playbook against an SSH
// test host: an install runs in a Job without a service account token; the
// operator pod deleted in the middle leaves the Job running and the new pod
// follows the same run to its end; a failing task is reported with its
// host and message; deleting the deployment during a run deletes that
// run's Job and Secret, then the uninstall runs in a Job of its own, and
// nothing of any run is left. An EtcdRestore of a snapshot on an SSH backup
// host runs in a Job too, whose pod fetches the snapshot itself, and
// outlives an operator restart as well, and the install run that a restore
// asks for afterwards runs in a Job of its own.
func TestJobExecutor(t *testing.T) {
	if testing.Short() {
		t.Skip("in-cluster test: skipped in -short mode (builds the image, starts a real node and test hosts)")
	}
	testenv.Lane(t)
	steps := &timer{t: t, start: time.Now()}
	ctx := context.Background()

	archive := buildImage(t)
	cluster := node.Start(t, node.Options{})
	if err := cluster.ImportImage(archive); err != nil {
		t.Fatal(err)
	}
	dc := hosts.Start(t, 1)
	route(t, cluster, dc)
	k8s := newClient(t, cluster)
	statePV(t, k8s, "kao-state-jobs")
	helmInstall(t, cluster, "executor.type=job", "userRoles.fromConfigMaps=true")
	manager := waitForManager(t, k8s, "")
	steps.done("image, real node, one SSH host; helm install with executor.type=job")

	ns := "team-j"
	tenant(t, k8s, ns, dc)
	h := dc.Hosts()[0]
	kd := oneHostDeployment(ns, "jobs", "dc-ssh", h)
	create(t, k8s, kd)

	// The install runs in a Job's pod, which the operator pod's death
	// does not touch.
	runID := awaitRunInJob(t, k8s, kd, 5)
	steps.done("install under way in Job " + jobexec.JobName(runID))
	if err := k8s.Delete(ctx, manager); err != nil {
		t.Fatal(err)
	}
	waitForManager(t, k8s, manager.Name)
	steps.done("operator pod deleted mid-install; a new one Ready")
	last := awaitRunEnd(t, k8s, kd, runID, 10*time.Minute)
	if last.Result != kaov1.RunSucceeded {
		t.Fatalf("the install followed across the restart ended %s: %s", last.Result, last.Message)
	}
	assertRunGone(t, k8s, ns, runID)
	if !eventSeen(t, k8s, kd, "PlaybookReattached") {
		t.Error("no PlaybookReattached Event: the new operator pod did not say it followed the run")
	}
	waitFor(t, 3*time.Minute, "condition Ready", func() (bool, error) {
		cur := &kaov1.KarmadaDeployment{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur)
		return err == nil && meta.IsStatusConditionTrue(cur.Status.Conditions, kaov1.ReadyCondition), err
	})
	steps.done("the same run completed in its Job and was recorded; Job and Secret gone; Ready")

	restoreThroughJob(t, k8s, dc, kd)
	steps.done("snapshot to the SSH backup host; restored through a Job across an operator restart; Ready")
	// A successful restore asks for one install run (kao.io/restored-at),
	// in a Job too; the next step's run comes after it.
	cur := &kaov1.KarmadaDeployment{}
	waitFor(t, 10*time.Minute, "the install run after the restore", func() (bool, error) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur)
		at, perr := time.Parse(time.RFC3339, cur.Annotations[kaov1.RestoredAtAnnotation])
		l := cur.Status.LastRun
		return err == nil && perr == nil && l != nil && cur.Status.Progress == nil && !l.StartTime.Time.Before(at), err
	})
	if l := cur.Status.LastRun; l.Result != kaov1.RunSucceeded || l.Playbook != "install.yml" {
		t.Errorf("the run after the restore: %s %s: %s", l.Playbook, l.Result, l.Message)
	}
	if !eventSeen(t, k8s, kd, "ReapplyingAfterRestore") {
		t.Error("no ReapplyingAfterRestore Event: nothing says why the install ran after the restore")
	}
	runID = cur.Status.LastRun.ID

	// A user role that fails: its task is reported with host and message.
	create(t, k8s, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "breaker", Namespace: ns},
		Data: map[string]string{"tasks__main.yml": "- name: Breaker | Refuse this host\n  ansible.builtin.fail:\n    msg: kao-job-executor-test refuses {{ inventory_hostname }}\n"}})
	updateSpec(t, k8s, kd, func(cur *kaov1.KarmadaDeployment) {
		cur.Spec.Addons.UserRoles = []kaov1.UserRole{{Name: "breaker", Stage: kaov1.BeforeInstallStage,
			Groups: []kaov1.InventoryGroup{"etcd"}, ConfigMapName: "breaker"}}
	})
	failedID := ""
	waitFor(t, 5*time.Minute, "the run of the spec with the failing role", func() (bool, error) {
		cur := &kaov1.KarmadaDeployment{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur)
		if l := cur.Status.LastRun; err == nil && l != nil && l.ID > runID && l.Generation == cur.Generation && cur.Status.Progress == nil {
			failedID = l.ID
		}
		return failedID != "", err
	})
	last = awaitRunEnd(t, k8s, kd, failedID, time.Minute)
	if last.Result != kaov1.RunFailed || len(last.FailedTasks) == 0 {
		t.Fatalf("the run with the failing role ended %s with failed tasks %+v: %s", last.Result, last.FailedTasks, last.Message)
	}
	if f := last.FailedTasks[0]; f.Host != h.Name || !strings.Contains(f.Message, "kao-job-executor-test refuses "+h.Name) ||
		!strings.Contains(f.Task, "Breaker | Refuse this host") {
		t.Errorf("the failed task does not name its host, task and message: %+v", f)
	}
	assertRunGone(t, k8s, ns, failedID)
	steps.done("a failing task in a Job reported with host, task and message")

	// Deleting the deployment during a run: the run's Job and Secret go,
	// then the uninstall runs in a Job of its own.
	updateSpec(t, k8s, kd, func(cur *kaov1.KarmadaDeployment) { cur.Spec.Addons.UserRoles = nil })
	cancelledID := awaitRunInJob(t, k8s, kd, 3)
	if err := k8s.Delete(ctx, kd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Minute, "the deployment gone after its uninstall", func() (bool, error) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), &kaov1.KarmadaDeployment{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	assertRunGone(t, k8s, ns, cancelledID)
	if out, err := dc.Run(ctx, h.Name, "systemctl list-unit-files 'karmada*' 'etcd*' --no-legend | wc -l"); err != nil || strings.TrimSpace(out) != "0" {
		t.Errorf("units left on %s after the uninstall: %q %v", h.Name, out, err)
	}
	waitFor(t, 2*time.Minute, "no run Job, pod or Secret left in "+ns, func() (bool, error) {
		n, err := runObjects(k8s, ns)
		return n == 0, err
	})
	steps.done("deleted mid-run: its Job and Secret gone, uninstalled through a Job, nothing left")
}

// awaitRunInJob waits for a run of kd that has done at least tasks tasks,
// checks that it runs in a Job whose pod mounts no service account token,
// and returns its ID.
func awaitRunInJob(t *testing.T, k8s client.Client, kd *kaov1.KarmadaDeployment, tasks int32) string {
	t.Helper()
	ctx := context.Background()
	runID := ""
	waitFor(t, 5*time.Minute, fmt.Sprintf("a run of %s with %d tasks done", kd.Name, tasks), func() (bool, error) {
		cur := &kaov1.KarmadaDeployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur); err != nil {
			return false, err
		}
		if last := cur.Status.LastRun; last != nil && last.Generation == cur.Generation && cur.Status.Progress == nil && runID != "" && last.ID == runID {
			return false, fmt.Errorf("run %s ended before it was seen at work: %s %s", runID, last.Result, last.Message)
		}
		if p := cur.Status.Progress; p != nil && p.TasksDone >= tasks {
			runID = p.RunID
			return true, nil
		}
		return false, nil
	})
	job := &batchv1.Job{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: kd.Namespace, Name: jobexec.JobName(runID)}, job); err != nil {
		t.Fatalf("run %s has no Job: %v", runID, err)
	}
	if a := job.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("run %s's pod mounts a service account token", runID)
	}
	if job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 0 || job.Spec.ActiveDeadlineSeconds == nil {
		t.Errorf("run %s's Job is retried or has no deadline: %+v", runID, job.Spec)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: kd.Namespace, Name: jobexec.JobName(runID)}, &corev1.Secret{}); err != nil {
		t.Errorf("run %s has no Secret while it runs: %v", runID, err)
	}
	return runID
}

// awaitRunEnd waits until status.lastRun records run runID, and returns it.
func awaitRunEnd(t *testing.T, k8s client.Client, kd *kaov1.KarmadaDeployment, runID string, timeout time.Duration) *kaov1.RunStatus {
	t.Helper()
	var last *kaov1.RunStatus
	waitFor(t, timeout, "the end of run "+runID, func() (bool, error) {
		cur := &kaov1.KarmadaDeployment{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(kd), cur); err != nil {
			return false, err
		}
		if l := cur.Status.LastRun; l != nil && l.ID > runID {
			return false, fmt.Errorf("run %s was never recorded: the last run is %s (%s: %s)", runID, l.ID, l.Result, l.Message)
		}
		last = cur.Status.LastRun
		return last != nil && last.ID == runID && (cur.Status.Progress == nil || cur.Status.Progress.RunID != runID), nil
	})
	return last
}

// assertRunGone waits for a run's Job, pods and Secret to be deleted.
func assertRunGone(t *testing.T, k8s client.Client, ns, runID string) {
	t.Helper()
	waitFor(t, 2*time.Minute, "run "+runID+"'s Job, pod and Secret deleted", func() (bool, error) {
		ctx := context.Background()
		key := client.ObjectKey{Namespace: ns, Name: jobexec.JobName(runID)}
		jobErr := k8s.Get(ctx, key, &batchv1.Job{})
		secretErr := k8s.Get(ctx, key, &corev1.Secret{})
		pods := &corev1.PodList{}
		if err := k8s.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{jobexec.RunIDLabel: runID}); err != nil {
			return false, err
		}
		return apierrors.IsNotFound(jobErr) && apierrors.IsNotFound(secretErr) && len(pods.Items) == 0, nil
	})
}

// runObjects counts the run Jobs, pods and Secrets of a namespace.
func runObjects(k8s client.Client, ns string) (int, error) {
	ctx := context.Background()
	sel := client.MatchingLabels{"app.kubernetes.io/component": "kao-run"}
	jobs, pods, secrets := &batchv1.JobList{}, &corev1.PodList{}, &corev1.SecretList{}
	for _, l := range []client.ObjectList{jobs, pods, secrets} {
		if err := k8s.List(ctx, l, client.InNamespace(ns), sel); err != nil {
			return 0, err
		}
	}
	return len(jobs.Items) + len(pods.Items) + len(secrets.Items), nil
}

// updateSpec changes kd's spec, retrying on conflicts.
func updateSpec(t *testing.T, k8s client.Client, kd *kaov1.KarmadaDeployment, change func(*kaov1.KarmadaDeployment)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := &kaov1.KarmadaDeployment{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(kd), cur); err != nil {
			return err
		}
		change(cur)
		return k8s.Update(context.Background(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// eventSeen tells whether kd has an Event with the reason.
func eventSeen(t *testing.T, k8s client.Client, kd *kaov1.KarmadaDeployment, reason string) bool {
	t.Helper()
	events := &corev1.EventList{}
	if err := k8s.List(context.Background(), events, client.InNamespace(kd.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == kd.Name && e.Reason == reason {
			return true
		}
	}
	return false
}

// restoreThroughJob takes a snapshot of kd's etcd to a directory on its own
// host over SSH (an EtcdBackup, whose snapshot a Job of the backup takes),
// then restores it with an EtcdRestore. The
// restore's run is a Job of the restore whose pod fetches the snapshot from
// the backup host; the operator pod is deleted while it runs, and the new
// one follows it (PlaybookReattached) and records it. The restore
// succeeds, etcd on the host keeps its previous data beside the restored
// one, nothing of the run is left, and the deployment is Ready again.
func restoreThroughJob(t *testing.T, k8s client.Client, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	ctx := context.Background()
	ns, h := kd.Namespace, dc.Hosts()[0]
	eb := &kaov1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "to-host", Namespace: ns}, Spec: kaov1.EtcdBackupSpec{
		DeploymentName: kd.Name,
		Destination: kaov1.BackupDestination{Type: kaov1.SSHDestination, SSH: &kaov1.SSHBackupDestination{
			Address: h.Address, Port: int32(h.Port), User: h.User, Directory: "/var/backups/kao-jobs",
			PrivateKeySecretRef: kaov1.SecretKeyReference{Name: "dc-ssh", Key: "id_ed25519"},
			KnownHostsSecretRef: kaov1.SecretKeyReference{Name: "dc-ssh", Key: "known_hosts"},
		}},
	}}
	create(t, k8s, eb)
	var snap *kaov1.Snapshot
	waitFor(t, 3*time.Minute, "the snapshot on the backup host", func() (bool, error) {
		cur := &kaov1.EtcdBackup{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(eb), cur)
		snap = cur.Status.LastSnapshot
		return err == nil && snap != nil, err
	})
	if !strings.HasPrefix(snap.Location, h.Address+":/var/backups/kao-jobs/") {
		t.Fatalf("the snapshot is at %s, not on the backup host", snap.Location)
	}
	// The snapshot was taken by a Job of the backup, which is gone with its
	// pod and Secret once the operator recorded it.
	snapshotJob := ""
	waitFor(t, time.Minute, "the backup's SnapshotJobStarted Event", func() (bool, error) {
		events := &corev1.EventList{}
		err := k8s.List(ctx, events, client.InNamespace(ns))
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "EtcdBackup" && e.Reason == "SnapshotJobStarted" && strings.Contains(e.Message, snap.Name) {
				_, snapshotJob, _ = strings.Cut(e.Message, " in Job ")
			}
		}
		return snapshotJob != "", err
	})
	assertRunGone(t, k8s, ns, strings.TrimPrefix(snapshotJob, "kao-run-"))

	er := &kaov1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Name: "from-host", Namespace: ns},
		Spec: kaov1.EtcdRestoreSpec{DeploymentName: kd.Name, Source: kaov1.RestoreSource{BackupName: eb.Name}}}
	create(t, k8s, er)
	runID := ""
	waitFor(t, 3*time.Minute, "the restore's run under way", func() (bool, error) {
		cur := &kaov1.EtcdRestore{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(er), cur)
		if err == nil && cur.Status.Progress != nil {
			runID, er.UID = cur.Status.Progress.RunID, cur.UID
		}
		if err == nil && cur.Status.Phase == kaov1.RestoreFailed {
			return false, fmt.Errorf("the restore failed before it was seen at work: %+v", cur.Status.Conditions)
		}
		return runID != "", err
	})
	job := &batchv1.Job{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: jobexec.JobName(runID)}, job); err != nil {
		t.Fatalf("the restore's run %s has no Job: %v", runID, err)
	}
	if job.Labels[jobexec.OwnerUIDLabel] != string(er.UID) {
		t.Errorf("the restore's Job belongs to %q, not to the restore %s", job.Labels[jobexec.OwnerUIDLabel], er.UID)
	}

	manager := waitForManager(t, k8s, "")
	if err := k8s.Delete(ctx, manager); err != nil {
		t.Fatal(err)
	}
	waitForManager(t, k8s, manager.Name)
	var done *kaov1.EtcdRestore
	waitFor(t, 10*time.Minute, "the restore's end", func() (bool, error) {
		done = &kaov1.EtcdRestore{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(er), done)
		return err == nil && (done.Status.Phase == kaov1.RestoreSucceeded || done.Status.Phase == kaov1.RestoreFailed), err
	})
	if done.Status.Phase != kaov1.RestoreSucceeded || done.Status.LastRun == nil || done.Status.LastRun.ID != runID {
		t.Fatalf("the restore ended %s, last run %+v; want run %s to succeed", done.Status.Phase, done.Status.LastRun, runID)
	}
	assertRunGone(t, k8s, ns, runID)
	reattached := false
	events := &corev1.EventList{}
	if err := k8s.List(ctx, events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		reattached = reattached || e.InvolvedObject.Kind == "EtcdRestore" && e.Reason == "PlaybookReattached"
	}
	if !reattached {
		t.Error("no PlaybookReattached Event on the restore: the new operator pod did not follow its Job")
	}
	if out, err := dc.Run(ctx, h.Name, "ls -d /var/lib/karmada-etcd.before-restore-* | wc -l"); err != nil || strings.TrimSpace(out) != "1" {
		t.Errorf("etcd's previous data beside the restored one on %s: %q %v", h.Name, out, err)
	}
	waitFor(t, 5*time.Minute, "condition Ready after the restore", func() (bool, error) {
		cur := &kaov1.KarmadaDeployment{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur)
		return err == nil && meta.IsStatusConditionTrue(cur.Status.Conditions, kaov1.ReadyCondition), err
	})
}
