package karmadadeployment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/probe"
)

// clusterWatchWriteTimeout bounds one status write of a Cluster watch.
const clusterWatchWriteTimeout = 30 * time.Second

// clusterWatches follow Karmada's Cluster objects, one watch per deployment
// whose karmada-apiserver answered a probe, so that status.members,
// status.readyMembers, MembersReady and Ready change within moments of
// Karmada's own Clusters, during runs too, instead of at the next probe
// (up to probeInterval later). The probe reads the clusters from the
// watch, so a deployment costs its Karmada API server one open watch in
// place of a list every probe interval.
//
// It is a manager Runnable that needs the leader: watches run only while
// this process reconciles, and stop with it.
type clusterWatches struct {
	// watch follows the clusters of one API server: probe.WatchClusters,
	// or a fake in narrow tests.
	watch func(ctx context.Context, api probe.API, changed func([]probe.ClusterState, error))
	// record writes the members' status of a deployment from its clusters.
	record func(ctx context.Context, kd *kaov1.KarmadaDeployment, clusters []probe.ClusterState)

	mu    sync.Mutex
	ctx   context.Context
	byUID map[types.UID]*clusterWatch
}

// clusterWatch is the watch of one deployment.
type clusterWatch struct {
	// key is the API server and client certificate it watches with: a
	// new endpoint or a renewed certificate starts a new watch.
	key    string
	owner  types.NamespacedName
	cancel context.CancelFunc

	mu sync.Mutex
	// synced is true while the clusters are those of the last successful list
	// and the events since.
	synced   bool
	clusters []probe.ClusterState
}

func newClusterWatches(record func(context.Context, *kaov1.KarmadaDeployment, []probe.ClusterState)) *clusterWatches {
	return &clusterWatches{watch: probe.WatchClusters, record: record, byUID: map[types.UID]*clusterWatch{}}
}

// Start implements manager.Runnable.
func (w *clusterWatches) Start(ctx context.Context) error {
	w.mu.Lock()
	w.ctx = ctx
	w.mu.Unlock()
	<-ctx.Done()
	w.mu.Lock()
	defer w.mu.Unlock()
	for uid, cw := range w.byUID {
		cw.cancel()
		delete(w.byUID, uid)
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (w *clusterWatches) NeedLeaderElection() bool { return true }

// watchKey identifies the API server and the client certificate of api.
func watchKey(api probe.API) string {
	h := sha256.New()
	h.Write([]byte(api.URL))
	if api.TLS != nil {
		for _, c := range api.TLS.Certificates {
			for _, der := range c.Certificate {
				h.Write(der)
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// clusters makes sure a watch of kd's clusters through api runs and returns
// what it knows; ok is false until its first list succeeded (and after a
// list failed), when the caller must read the clusters itself.
func (w *clusterWatches) clusters(kd *kaov1.KarmadaDeployment, api probe.API) (clusters []probe.ClusterState, ok bool) {
	key := watchKey(api)
	w.mu.Lock()
	if w.ctx == nil || w.ctx.Err() != nil {
		w.mu.Unlock()
		return nil, false
	}
	cw := w.byUID[kd.UID]
	if cw == nil || cw.key != key {
		if cw != nil {
			cw.cancel()
		}
		cw = w.start(kd, api, key)
		w.byUID[kd.UID] = cw
	}
	w.mu.Unlock()
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.clusters, cw.synced
}

// start runs a new watch; called with w.mu held.
func (w *clusterWatches) start(kd *kaov1.KarmadaDeployment, api probe.API, key string) *clusterWatch {
	ctx, cancel := context.WithCancel(w.ctx)
	cw := &clusterWatch{key: key, owner: client.ObjectKeyFromObject(kd), cancel: cancel}
	// Status is written for this object only: a deployment created again
	// under its name is another UID with a watch of its own.
	ref := &kaov1.KarmadaDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: kd.Namespace, Name: kd.Name, UID: kd.UID}}
	log := ctrl.Log.WithName("clusters").WithValues("KarmadaDeployment", cw.owner)
	go w.watch(ctx, api, func(clusters []probe.ClusterState, err error) {
		cw.mu.Lock()
		cw.synced, cw.clusters = err == nil, clusters
		cw.mu.Unlock()
		if err != nil {
			log.V(1).Info("Listing Karmada's clusters failed; the watch tries again", "error", err.Error())
			return
		}
		wctx, cancel := context.WithTimeout(ctx, clusterWatchWriteTimeout)
		defer cancel()
		w.record(wctx, ref, clusters)
	})
	return cw
}

// stop ends the watch of the deployment that had this namespace and name.
func (w *clusterWatches) stop(key types.NamespacedName) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for uid, cw := range w.byUID {
		if cw.owner == key {
			cw.cancel()
			delete(w.byUID, uid)
		}
	}
}

// recordClusters writes what a Cluster watch saw into the deployment's
// status: its members, MembersReady and, outside runs and when the last
// probe could judge the control plane, Ready and the phase. A deployment
// kao has not observed yet, a paused one and one being deleted are left
// alone.
func (r *Reconciler) recordClusters(ctx context.Context, kd *kaov1.KarmadaDeployment, clusters []probe.ClusterState) {
	now := metav1.NewTime(r.Clock.Now())
	err := r.statusWriter().Update(ctx, kd, func(cur *kaov1.KarmadaDeployment) {
		if cur.Status.ObservedGeneration == 0 || !cur.DeletionTimestamp.IsZero() || cur.Spec.Paused {
			return
		}
		observeMembers(cur, clusters, nil, now)
		// During a run PlaybookSucceeded is Unknown: Ready is summed up
		// again after it, by the probe, as always.
		running := r.runs.Get(cur) != nil || cur.Status.Progress != nil
		if !running && sumUpReady(cur) {
			cur.Status.Phase = phaseFor(cur, false)
		}
	})
	if err != nil && ctx.Err() == nil {
		ctrl.Log.WithName("clusters").Error(err, "Recording the member clusters", "KarmadaDeployment", client.ObjectKeyFromObject(kd))
	}
}
