package etcdrestore

import (
	"testing"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
)

// noExecutor is a RemoteExecutor that is never called (its methods are a
// nil interface's): inJob only asks whether there is one.
type noExecutor struct{ pipeline.RemoteExecutor }

// TestWhichRestoresRunInAJob: only with a Job executor, only a snapshot on a
// backup host (a Job's pod cannot read the operator's state volume), and
// only for a deployment whose runs may leave the operator's process.
func TestWhichRestoresRunInAJob(t *testing.T) {
	onHost := &kaov1.Snapshot{Name: "kd-20261127T000000Z.db", Location: "192.0.2.20:/var/backups/kd-20261127T000000Z.db"}
	onVolume := &kaov1.Snapshot{Name: "kd-20261127T000000Z.db", Location: "/var/lib/kao/backups/ns/kd/kd-20261127T000000Z.db"}
	plain := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{Mode: kaov1.BinaryMode}}
	mirrored := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{Mode: kaov1.BinaryMode, Artifacts: kaov1.ArtifactsSpec{URL: "https://mirror.example/bundle.tar"}}}
	for _, tc := range []struct {
		name   string
		remote pipeline.RemoteExecutor
		kd     *kaov1.KarmadaDeployment
		snap   *kaov1.Snapshot
		want   bool
	}{
		{"a backup host's snapshot with a Job executor", noExecutor{}, plain, onHost, true},
		{"no Job executor", nil, plain, onHost, false},
		{"a snapshot on the operator's volume", noExecutor{}, plain, onVolume, false},
		{"a deployment whose bundle is on the operator's volume", noExecutor{}, mirrored, onHost, false},
	} {
		r := &Reconciler{Options: pipeline.Options{Remote: tc.remote}}
		if got := r.inJob(tc.kd, tc.snap); got != tc.want {
			t.Errorf("%s: in a Job %v, want %v", tc.name, got, tc.want)
		}
	}
}
