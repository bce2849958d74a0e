package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBuildFlagsAreMakeTestsFlags keeps BuildFlags and the Makefile's
// GOTESTFLAGS together: a build with other flags than the test binaries'
// compiles every package it imports again.
func TestBuildFlagsAreMakeTestsFlags(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(RepoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "GOTESTFLAGS ?="); ok {
			flags = strings.Fields(rest)
		}
	}
	if flags == nil {
		t.Fatal("the Makefile sets no GOTESTFLAGS")
	}
	for _, f := range BuildFlags {
		if !slices.Contains(flags, f) {
			t.Errorf("GOTESTFLAGS (%s) lacks %s of testenv.BuildFlags", strings.Join(flags, " "), f)
		}
	}
	for _, f := range flags {
		if (strings.HasPrefix(f, "-ldflags") || strings.HasPrefix(f, "-gcflags")) && !slices.Contains(BuildFlags, f) {
			t.Errorf("GOTESTFLAGS has %s, which testenv.BuildFlags lacks", f)
		}
	}
}
