package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestCacheOptionsWatchTheNamedNamespaces(t *testing.T) {
	all, err := cacheOptions(" ")
	if err != nil || all.DefaultNamespaces != nil {
		t.Errorf("no namespaces must watch every namespace: %+v, %v", all, err)
	}
	two, err := cacheOptions("team-a, team-b")
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(two.DefaultNamespaces)); !slices.Equal(got, []string{"team-a", "team-b"}) {
		t.Errorf("watched namespaces %v", got)
	}
	for _, bad := range []string{"team-a,", "Team", "a/b", "team-a,../x"} {
		if _, err := cacheOptions(bad); err == nil || !strings.Contains(err.Error(), "--watch-namespaces") {
			t.Errorf("cacheOptions(%q) = %v, want an error naming the flag", bad, err)
		}
	}
}
