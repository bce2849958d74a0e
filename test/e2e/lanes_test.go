package e2e

import (
	"flag"
	"testing"

	"github.com/kao-io/kao/internal/testenv"
)

// longTest marks t as one of the package's long tests: it runs in parallel
// with the others, in one of the machine's test lanes, which every package's
// heavy tests share, longest first (testenv.Lane).
func longTest(t *testing.T) {
	testenv.Lane(t)
}

// releaseEveryLongTest raises go test's -parallel limit above the number of
// long tests, so that all of them wait for a lane at once and the lanes,
// not go test's scheduler, decide which starts first.
func releaseEveryLongTest() {
	_ = flag.Lookup("test.parallel").Value.Set("1000")
}
