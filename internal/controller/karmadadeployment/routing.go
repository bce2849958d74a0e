package karmadadeployment

import (
	"context"
	"fmt"
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/probe"
)

// hostSlice is an EndpointSlice the install applies in karmada-apiserver to
// route to components on the hosts (binary mode has no Pods): karmada-apiserver
// (--enable-aggregator-routing) picks a random endpoint whose ready
// condition is not false for each aggregated API request, webhook call and
// CRD conversion.
type hostSlice struct {
	name string
	// ready is what the probes said, by host address.
	ready map[string]bool
}

// Names of the EndpointSlices the karmada_resources role applies.
const (
	aggregatedAPIServerSlice = "karmada-aggregated-apiserver-hosts"

	webhookSlice = "karmada-webhook-hosts"

	karmadaSystemNamespace = "karmada-system"
)

// endpointReadiness maps each host's address to its probe result.
func endpointReadiness(hosts []kaov1.Host, eps []probe.Endpoint) map[string]bool {
	byName := map[string]bool{}
	for _, e := range eps {
		byName[e.Host] = e.Ready
	}
	out := map[string]bool{}
	for _, h := range hosts {
		out[h.Address] = byName[h.Name]
	}
	return out
}

// routeAroundDeadHosts marks the endpoints of hosts whose component failed
// its probe as not ready, and those that pass as ready again, so that
// karmada-apiserver stops sending webhook calls and Cluster API requests to
// a host that is down. It writes only when a condition differs; it never
// adds or removes endpoints (the install owns the list) and it never marks
// every endpoint not ready: with nothing healthy, routing stays as it is.
func routeAroundDeadHosts(ctx context.Context, apiURL string, bundle pki.Bundle, want []hostSlice) error {
	cfg := &rest.Config{
		Host: apiURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: bundle["ca.crt"], CertData: bundle["admin-client.crt"], KeyData: bundle["admin-client.key"],
		},
		UserAgent: "kao-operator",
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	slicesAPI := cs.DiscoveryV1().EndpointSlices(karmadaSystemNamespace)
	for _, w := range want {
		cur, err := slicesAPI.Get(ctx, w.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // not installed yet
		}
		if err != nil {
			return fmt.Errorf("reading EndpointSlice %s: %w", w.name, err)
		}
		next, changed := withReadiness(cur, w.ready)
		if !changed {
			continue
		}
		if _, err := slicesAPI.Update(ctx, next, metav1.UpdateOptions{FieldManager: "kao-operator"}); err != nil {
			return fmt.Errorf("updating EndpointSlice %s: %w", w.name, err)
		}
	}
	return nil
}

// withReadiness returns the slice with each known address's ready condition
// set from the probes, and whether anything changed.
func withReadiness(s *discoveryv1.EndpointSlice, ready map[string]bool) (*discoveryv1.EndpointSlice, bool) {
	anyReady := slices.ContainsFunc(s.Endpoints, func(e discoveryv1.Endpoint) bool {
		return len(e.Addresses) > 0 && ready[e.Addresses[0]]
	})
	if !anyReady {
		return s, false
	}
	out := s.DeepCopy()
	changed := false
	for i, e := range out.Endpoints {
		if len(e.Addresses) == 0 {
			continue
		}
		r, known := ready[e.Addresses[0]]
		if !known {
			continue
		}
		if e.Conditions.Ready == nil || *e.Conditions.Ready != r {
			out.Endpoints[i].Conditions.Ready = &r
			changed = true
		}
	}
	return out, changed
}
