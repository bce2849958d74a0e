package etcdrestore

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
)

// TestRestoreRunSpecGolden pins the etcd restore's run of the binary sample
// with the EtcdRestore sample: the deployment's run without its members,
// plus the snapshot and the restore's identity.
func TestRestoreRunSpecGolden(t *testing.T) {
	kd := controllertest.SampleDeployment(t, controllertest.BinarySample)
	kd.Spec.Members, kd.Status.Members = nil, nil
	in := controllertest.FixedInputs(kd)
	r := controllertest.AssembleForGolden(t, kd, in, pipeline.EtcdRestorePlaybook)
	er := &kaov1.EtcdRestore{}
	controllertest.ReadSample(t, "kao_v1alpha1_etcdrestore.yaml", er)
	er.Namespace, er.UID = kd.Namespace, types.UID("9a8b7c6d-aaaa-bbbb-cccc-ddddeeeeffff")
	snap := &kaov1.Snapshot{Name: "dc1-20261126-000000.db", SHA256: strings.Repeat("ab", 32)}
	for k, v := range restoreExtraVars(er, snap, filepath.Join(r.StateDir, "restores", "snapshot.db")) {
		r.Spec.ExtraVars[k] = v
	}
	controllertest.CompareGolden(t, "binary-etcd-restore", r.Encode(t))
}
