package karmadadeployment

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
)

// runSpecCase is one run assembled from a sample CR.
type runSpecCase struct {
	name, sample, playbook string
	// change edits the sample before the run is assembled; it returns the
	// upgrade's inventory groups, if any.
	change func(t *testing.T, kd *kaov1.KarmadaDeployment) map[string][]string
}

const (
	containerizedSample = "kao_v1alpha1_karmadadeployment_containerized.yaml"
)

// TestRunSpecGolden pins what every playbook's run of a KarmadaDeployment
// gets from the sample CRs in config/samples: the inventory, extra vars,
// groups, secret files (by checksum), redaction, roles path, fact cache and
// limits. It is the proof that moving the run pipeline around changes no run.
func TestRunSpecGolden(t *testing.T) {
	cases := []runSpecCase{
		{name: "binary-install", sample: controllertest.BinarySample, playbook: pipeline.InstallPlaybook},
		{name: "binary-members", sample: controllertest.BinarySample, playbook: pipeline.MembersPlaybook},
		{name: "binary-upgrade", sample: controllertest.BinarySample, playbook: pipeline.UpgradePlaybook, change: olderControlPlane},
		{name: "binary-uninstall", sample: controllertest.BinarySample, playbook: pipeline.UninstallPlaybook, change: deleting},
		{name: "containerized-install", sample: containerizedSample, playbook: pipeline.InstallPlaybook},
		{name: "containerized-uninstall", sample: containerizedSample, playbook: pipeline.UninstallPlaybook, change: deleting},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kd := controllertest.SampleDeployment(t, c.sample)
			var groups map[string][]string
			if c.change != nil {
				groups = c.change(t, kd)
			}
			in := controllertest.FixedInputs(kd)
			in.UpgradeGroups = groups
			r := controllertest.AssembleForGolden(t, kd, in, c.playbook)
			controllertest.CompareGolden(t, c.name, r.Encode(t))
		})
	}
}

// olderControlPlane makes the sample's control plane run Karmada v1.17.1
// everywhere, so moving to the spec's v1.18.1 is an upgrade.
func olderControlPlane(t *testing.T, kd *kaov1.KarmadaDeployment) map[string][]string {
	t.Helper()
	kd.Status.Version = "v1.17.1"
	for _, c := range upgradeOrder {
		v := "v1.17.1"
		if c.family == kubernetesFamily {
			v = "v1.35.4"
		}
		st := kaov1.ComponentStatus{Name: c.name, Version: v}
		for _, h := range componentHostNames(kd, c.name) {
			st.Instances = append(st.Instances, kaov1.ComponentInstance{Host: h, Version: v})
		}
		kd.Status.Components = append(kd.Status.Components, st)
	}
	plan, err := planUpgrade(kd, targetVersions(kd, &pipeline.Artifacts{Karmada: "v1.18.1", Kubernetes: "v1.35.4", Etcd: "v3.6.6"}))
	if err != nil || plan == nil {
		t.Fatalf("planning the upgrade: %v, %v", plan, err)
	}
	return plan.inventoryGroups()
}

// deleting marks the sample as being deleted, as an uninstall run sees it.
func deleting(_ *testing.T, kd *kaov1.KarmadaDeployment) map[string][]string {
	now := metav1.Now()
	kd.DeletionTimestamp = &now
	return nil
}
