package controller

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kao-io/kao/internal/controller/etcdbackup"
	"github.com/kao-io/kao/internal/controller/etcdrestore"
	"github.com/kao-io/kao/internal/controller/karmadadeployment"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/metrics"
)

// Options are the operator's settings, for all three controllers.
type Options = pipeline.Options

// Policy is what the operator's administrator lets tenants' specs ask for.
type Policy = pipeline.Policy

// RunLimits bound the runs in progress at once.
type RunLimits = pipeline.RunLimits

// DefaultMaxConcurrentProbes is how many control planes are probed at once
// by default.
const DefaultMaxConcurrentProbes = pipeline.DefaultMaxConcurrentProbes

// RemoteExecutor runs playbooks away from the operator's process.
type RemoteExecutor = pipeline.RemoteExecutor

// SetupAll registers the KarmadaDeployment, EtcdBackup and EtcdRestore
// controllers with a manager.
func SetupAll(mgr ctrl.Manager, o Options) error {
	if err := metrics.Setup(mgr); err != nil {
		return fmt.Errorf("setting up kao's metrics: %w", err)
	}
	o.Sweep = pipeline.NewSweep(o.StateDir, mgr.GetClient())
	if err := mgr.Add(o.Sweep); err != nil {
		return fmt.Errorf("setting up the state directory sweep: %w", err)
	}
	kd := &karmadadeployment.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("kao"),
		// The host cluster of inCluster deployments.
		InClusterConfig: mgr.GetConfig(),
		Options:         o,
	}
	if err := kd.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the KarmadaDeployment controller: %w", err)
	}
	if err := etcdbackup.Setup(mgr, o); err != nil {
		return fmt.Errorf("setting up the EtcdBackup controller: %w", err)
	}
	if err := etcdrestore.Setup(mgr, o); err != nil {
		return fmt.Errorf("setting up the EtcdRestore controller: %w", err)
	}
	return nil
}
