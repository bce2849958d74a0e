package karmadadeployment

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

func TestWithReadinessRoutesAroundFailedHostsOnly(t *testing.T) {
	yes := true
	slice := &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{
		{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
		{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
		{Addresses: []string{"10.0.0.9"}},
	}}
	ready := func(s *discoveryv1.EndpointSlice) []any {
		out := []any{}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil {
				out = append(out, nil)
			} else {
				out = append(out, *e.Conditions.Ready)
			}
		}
		return out
	}

	down, changed := withReadiness(slice, map[string]bool{"10.0.0.1": true, "10.0.0.2": false})
	if !changed || ready(down)[0] != true || ready(down)[1] != false || ready(down)[2] != nil {
		t.Errorf("host 2 failed its probe: changed=%v ready=%v", changed, ready(down))
	}
	if ready(slice)[1] != true {
		t.Error("the input slice was modified")
	}
	if _, changed := withReadiness(down, map[string]bool{"10.0.0.1": true, "10.0.0.2": false}); changed {
		t.Error("nothing differs, yet a write was asked for")
	}
	back, changed := withReadiness(down, map[string]bool{"10.0.0.1": true, "10.0.0.2": true})
	if !changed || ready(back)[1] != true {
		t.Errorf("host 2 is back: changed=%v ready=%v", changed, ready(back))
	}
	if _, changed := withReadiness(slice, map[string]bool{"10.0.0.1": false, "10.0.0.2": false}); changed {
		t.Error("with every host failing, routing must stay as it is")
	}
}
