package karmadadeployment

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"strconv"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/probe"
)

// Where the addons listen on the controlPlane hosts (roles/karmada_addons'
// defaults), and what registers them.
const (
	searchPort = 9443

	metricsAdapterPort = 9444

	estimatorGRPCBase = 10400

	searchAPIService = "v1alpha1.search.karmada.io"

	metricsAPIService = "v1beta1.metrics.k8s.io"

	deschedulerLeaseName = "karmada-descheduler"
)

// estimatorPorts maps each member of spec.members to its estimator's gRPC
// port, as the karmada_addons role numbers them: members sorted by name,
// the i-th on estimatorGRPCBase+i.
func estimatorPorts(members []kaov1.MemberSpec) map[string]int {
	names := make([]string, 0, len(members))
	for _, m := range members {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	out := make(map[string]int, len(names))
	for i, n := range names {
		out[n] = estimatorGRPCBase + i
	}
	return out
}

// addonNames are the status names of the addons.
var addonNames = []string{"karmada-search", "karmada-metrics-adapter", "karmada-descheduler", pipeline.EstimatorComponentPfx}

// isAddon tells whether a status name is an addon's.
func isAddon(name string) bool { return slices.Contains(addonNames, name) }

// disabledAddon tells whether a status name is an addon's that is not in
// enabled (enabledAddons).
func disabledAddon(name string, enabled map[string]*kaov1.AddonSpec) bool {
	_, on := enabled[name]
	return isAddon(name) && !on
}

// enabledAddons maps the status name of each addon spec.addons enables to
// its spec (the estimators of all members share one status entry).
func enabledAddons(kd *kaov1.KarmadaDeployment) map[string]*kaov1.AddonSpec {
	a := kd.Spec.Addons
	out := map[string]*kaov1.AddonSpec{}
	for name, spec := range map[string]*kaov1.AddonSpec{
		"karmada-search":               a.Search,
		"karmada-metrics-adapter":      a.MetricsAdapter,
		"karmada-descheduler":          a.Descheduler,
		pipeline.EstimatorComponentPfx: a.SchedulerEstimator,
	} {
		if pipeline.AddonEnabled(spec) {
			out[name] = spec
		}
	}
	return out
}

// observeAddons probes every enabled addon on the controlPlane hosts:
// karmada-search and karmada-metrics-adapter answer /readyz on each host and
// their APIService is Available, karmada-descheduler holds a renewed leader
// lease, and each member's estimator completes a mutual-TLS handshake on
// each host. api.URL is empty when no karmada-apiserver is ready.
func (r *Reconciler) observeAddons(ctx context.Context, kd *kaov1.KarmadaDeployment, bundle pki.Bundle,
	admin *tls.Config, api probe.API) []kaov1.ComponentStatus {
	a := kd.Spec.Addons
	cpHosts := pipeline.HostsWithRole(kd, kaov1.ControlPlaneRole)
	out := []kaov1.ComponentStatus{}

	apiServers := []struct {
		name       string
		spec       *kaov1.AddonSpec
		port       int
		apiService string
	}{
		{"karmada-search", a.Search, searchPort, searchAPIService},
		{"karmada-metrics-adapter", a.MetricsAdapter, metricsAdapterPort, metricsAPIService},
	}
	for _, s := range apiServers {
		if !pipeline.AddonEnabled(s.spec) {
			continue
		}
		c := component(s.name, cpHosts)
		summarize(&c, r.readyzProber().Readyz(ctx, hostURLs(cpHosts, s.port, "/readyz"), admin))
		if api.URL == "" {
			c.Ready = false
			c.Message = pipeline.TruncateString(c.Message+"; no karmada-apiserver is ready to read the APIService from", 512)
		} else if ok, msg := r.karmadaProber().APIService(ctx, api, s.apiService); !ok {
			c.Ready = false
			c.Message = pipeline.TruncateString(c.Message+"; "+msg, 512)
		}
		out = append(out, c)
	}

	if pipeline.AddonEnabled(a.Descheduler) {
		c := component("karmada-descheduler", cpHosts)
		if api.URL == "" {
			c.Message = "no karmada-apiserver is ready to read its leader lease from"
		} else {
			lease := probe.LeaseRef{Namespace: karmadaSystemNamespace, Name: deschedulerLeaseName}
			setLeaseStatus(&c, r.karmadaProber().Leases(ctx, api, []probe.LeaseRef{lease}, r.Clock.Now())[0])
		}
		out = append(out, c)
	}

	if pipeline.AddonEnabled(a.SchedulerEstimator) {
		c := component(pipeline.EstimatorComponentPfx, cpHosts)
		ports := estimatorPorts(kd.Spec.Members)
		cfg, err := pipeline.ClientTLS(bundle, pki.CertFile(pki.CA), pki.EstimatorClient)
		switch {
		case len(ports) == 0:
			// Nothing to run: no member, no estimator.
			c.Ready, c.Message = true, "no member clusters, no estimators"
		case err != nil:
			c.Message = pipeline.TruncateString(err.Error(), 512)
		default:
			addrs := map[string]string{}
			for _, h := range cpHosts {
				for m, p := range ports {
					addrs[h.Name+" "+m] = net.JoinHostPort(h.Address, strconv.Itoa(p))
				}
			}
			summarize(&c, r.karmadaProber().Handshake(ctx, addrs, cfg))
		}
		out = append(out, c)
	}
	return out
}
