// Command gotest runs `go test -json` with the arguments it is given and
// prints what a plain `go test` over several packages prints: one result line
// per package, and the whole output of a package or test that failed. Two
// things are added, so that a long suite says where its time goes:
//
//   - as each top-level test that ran longer than -slow ends, a line naming it,
//     its package, its time and when it ended (from the run's start), then a
//     line for each of its steps (first-level subtests) that ran longer than
//     -slow;
//   - at the end, the slowest top-level tests of the run, then each test or
//     package that failed with its first error line, so that the last lines
//     of a long run (all a CI page may show) name what failed. -failures
//     FILE also appends those lines to FILE, for a caller that prints them
//     after output of its own.
//
// It exits with go test's exit status. make test runs the suite through it:
//
//	go run ./hack/gotest -slow=30s -- -count=1 ./...
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"time"
)

func main() {
	slow := flag.Duration("slow", 30*time.Second, "print a line for each top-level test that ran at least this long")
	top := flag.Int("top", 25, "how many of the slowest tests to list at the end")
	failures := flag.String("failures", "", "append a line per failed test or package to this file")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: gotest [-slow D] [-top N] [-failures FILE] [--] go-test-arguments...")
		flag.PrintDefaults()
	}
	flag.Parse()

	cmd := exec.Command("go", append([]string{"test", "-json"}, flag.Args()...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gotest:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "gotest:", err)
		os.Exit(2)
	}
	s := newSummary(os.Stdout, *slow)
	readErr := s.read(out)
	waitErr := cmd.Wait()
	s.printSlowest(*top)
	s.printFailures()
	if *failures != "" && len(s.failures) > 0 {
		if err := appendLines(*failures, s.failures); err != nil {
			fmt.Fprintln(os.Stderr, "gotest:", err)
		}
	}
	if readErr != nil {
		fmt.Fprintln(os.Stderr, "gotest: reading go test's events:", readErr)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(waitErr, &exit):
		os.Exit(exit.ExitCode())
	case waitErr != nil:
		fmt.Fprintln(os.Stderr, "gotest:", waitErr)
		os.Exit(2)
	case readErr != nil || s.failed:
		os.Exit(1)
	}
}

// event is one line of `go test -json` (see `go doc test2json`).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

// result is a top-level test that ended.
type result struct {
	pkg, test string
	elapsed   time.Duration
}

// summary holds, per package and per running top-level test, the output kept
// until it is known whether it is to be shown.
type summary struct {
	w      io.Writer
	slow   time.Duration
	failed bool
	// held is the output of a package outside its tests (key pkg) and of
	// each running top-level test with its subtests (key pkg + "\x00" + test).
	held map[string][]string
	// resultLine is a package's "ok" or "FAIL" line, printed when the
	// package ends, after any output of its that is shown.
	resultLine map[string]string
	results    []result
	// steps are the slow first-level subtests of each running top-level
	// test (key as held's), printed under it when it ends.
	steps map[string][]result
	// start is the time of the run's first event.
	start time.Time
	// failures has a line per failed top-level test, and per failed package
	// none of whose tests failed (a build failure, a crash, a timeout).
	failures []string
	// failedTests counts the failed top-level tests per package.
	failedTests map[string]int
	// buildFailed has the packages whose test binary did not build.
	buildFailed map[string]bool
}

func newSummary(w io.Writer, slow time.Duration) *summary {
	return &summary{w: w, slow: slow, held: map[string][]string{}, resultLine: map[string]string{}, steps: map[string][]result{}, failedTests: map[string]int{}, buildFailed: map[string]bool{}}
}

// print writes to the summary's output; a write error (the reader went away)
// does not stop the run, whose exit status is what counts.
func (s *summary) print(text string) { _, _ = io.WriteString(s.w, text) }

func (s *summary) printf(format string, args ...any) { s.print(fmt.Sprintf(format, args...)) }

func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			// Not an event (go test prints some errors on stdout): show it.
			s.print(string(line) + "\n")
			continue
		}
		s.handle(e)
	}
	err := sc.Err()
	if err != nil {
		// A line beyond the scanner's limit: go test must still be able to
		// write the rest, or it would block and never exit.
		_, _ = io.Copy(io.Discard, r)
	}
	// A package that never said it ended (go test was stopped): its line.
	for _, l := range s.resultLine {
		s.print(l)
	}
	return err
}

func (s *summary) handle(e event) {
	if s.start.IsZero() && !e.Time.IsZero() {
		s.start = e.Time
	}
	switch e.Action {
	case "build-output":
		s.print(e.Output)
		return
	case "build-fail":
		s.failed = true
		pkg, _, _ := strings.Cut(e.ImportPath, " ") // "pkg [pkg.test]"
		s.buildFailed[pkg] = true
		return
	}
	top, _, _ := strings.Cut(e.Test, "/")
	key := e.Package
	if top != "" {
		key += "\x00" + top
	}
	switch e.Action {
	case "output":
		if e.Test == "" && strings.HasPrefix(e.Output, "?   \t") {
			s.print(e.Output) // no test files
			return
		}
		if e.Test == "" && isResultLine(e.Output) {
			s.resultLine[e.Package] = e.Output
			return
		}
		if !isProgressLine(e.Output) {
			s.held[key] = append(s.held[key], e.Output)
		}
	case "pass", "skip", "fail":
		if e.Test != "" && e.Test != top {
			// A subtest: its output stays with its top-level test; a slow
			// step is remembered for its line.
			if elapsed := seconds(e.Elapsed); e.Action == "pass" && elapsed >= s.slow && strings.Count(e.Test, "/") == 1 {
				s.steps[key] = append(s.steps[key], result{pkg: e.Package, test: e.Test[len(top)+1:], elapsed: elapsed})
			}
			return
		}
		if e.Action == "fail" {
			s.failed = true
			s.recordFailure(e.Package, e.Test, key)
			s.flush(key)
			if e.Test == "" {
				s.flushPackage(e.Package)
			}
		}
		delete(s.held, key)
		steps := s.steps[key]
		delete(s.steps, key)
		if e.Test == "" {
			s.print(s.resultLine[e.Package])
			delete(s.resultLine, e.Package)
			return
		}
		r := result{pkg: e.Package, test: e.Test, elapsed: seconds(e.Elapsed)}
		s.results = append(s.results, r)
		if e.Action != "fail" && r.elapsed >= s.slow {
			s.printf("--- %s: %s (%.2fs) in %s, ended at +%s\n", strings.ToUpper(e.Action), e.Test, e.Elapsed, e.Package, e.Time.Sub(s.start).Round(time.Second))
			for _, step := range steps {
				s.printf("      step %s (%.0fs)\n", step.test, step.elapsed.Seconds())
			}
		}
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// flush prints the output held for key.
func (s *summary) flush(key string) {
	for _, l := range s.held[key] {
		s.print(l)
	}
}

// flushPackage prints the output still held for a failed package's tests
// (those that had not ended: a timeout or a crash stops them), then its own.
func (s *summary) flushPackage(pkg string) {
	for _, k := range s.testKeys(pkg) {
		s.flush(k)
		delete(s.held, k)
	}
}

// testKeys returns, in order, the keys of held output of pkg's tests that
// have not ended.
func (s *summary) testKeys(pkg string) []string {
	var keys []string
	for k := range s.held {
		if strings.HasPrefix(k, pkg+"\x00") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// recordFailure keeps a line for a failed top-level test, or for a failed
// package none of whose tests failed, with the first line of its held output
// that reads as an error.
func (s *summary) recordFailure(pkg, test, key string) {
	if test != "" {
		s.failedTests[pkg]++
		s.failures = append(s.failures, fmt.Sprintf("FAIL %s %s: %s", pkg, test, firstError(s.held[key])))
		return
	}
	if s.failedTests[pkg] > 0 {
		return
	}
	if s.buildFailed[pkg] {
		s.failures = append(s.failures, fmt.Sprintf("FAIL %s (build failed)", pkg))
		return
	}
	// The package's own output, then that of tests cut off while running.
	lines := append([]string(nil), s.held[key]...)
	for _, k := range s.testKeys(pkg) {
		lines = append(lines, s.held[k]...)
	}
	s.failures = append(s.failures, fmt.Sprintf("FAIL %s (package): %s", pkg, firstError(lines)))
}

// firstError names what failed in a test's output: its first failed step
// (subtest), if any, and the first line a test file logged that reads as an
// error (a message that says so, a panic, a timeout), else the last line a
// test file logged (t.Fatal's, usually: what comes after it is cleanup,
// logged from the harness's files), else the last logged line, else the
// first line.
func firstError(lines []string) string {
	var step, first, lastLogged, lastTest, pick string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" {
			continue
		}
		if name, ok := strings.CutPrefix(t, "--- FAIL: "); ok {
			if step == "" && strings.Contains(name, "/") {
				step, _, _ = strings.Cut(name, " ")
			}
			continue
		}
		if strings.HasPrefix(t, "--- ") {
			continue
		}
		if first == "" {
			first = t
		}
		if loggedLine.MatchString(t) {
			lastLogged = t
		}
		if testLine.MatchString(t) {
			lastTest = t
		}
		if pick == "" && (errorLine.MatchString(t) || strings.HasPrefix(t, "panic:") || strings.Contains(t, "test timed out")) {
			pick = t
		}
	}
	pick = cmp.Or(pick, lastTest, lastLogged, first, "(no output)")
	const limit = 300
	if len(pick) > limit {
		pick = pick[:limit] + "..."
	}
	if step != "" {
		return step + ": " + pick
	}
	return pick
}

// loggedLine matches the file:line prefix testing puts before what a test
// logs, t.Log's and t.Error's alike; testLine, a line logged from a test
// file; errorLine, one whose message reads as an error.
var (
	loggedLine = regexp.MustCompile(`^[\w.-]+\.go:\d+: `)
	testLine   = regexp.MustCompile(`^[\w.-]+_test\.go:\d+: `)
	errorLine  = regexp.MustCompile(`^[\w.-]+_test\.go:\d+: .*(?i:error|fail|fatal|unexpected|timed out|timeout|want|got|expected|refused|denied)`)
)

// printFailures lists what failed, last, so that it ends the output.
func (s *summary) printFailures() {
	if len(s.failures) == 0 {
		return
	}
	s.printf("failed (%d):\n", len(s.failures))
	for _, f := range s.failures {
		s.printf("  %s\n", f)
	}
}

// appendLines appends lines to the file at path.
func appendLines(path string, lines []string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, strings.Join(lines, "\n")+"\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// printSlowest lists the n slowest top-level tests of the run.
func (s *summary) printSlowest(n int) {
	if len(s.results) == 0 || n <= 0 {
		return
	}
	sort.SliceStable(s.results, func(i, j int) bool { return s.results[i].elapsed > s.results[j].elapsed })
	if n > len(s.results) {
		n = len(s.results)
	}
	s.printf("slowest %d of %d top-level tests:\n", n, len(s.results))
	for _, r := range s.results[:n] {
		s.printf("  %8.1fs  %s  %s\n", r.elapsed.Seconds(), r.pkg, r.test)
	}
}

// isResultLine reports whether a package's output line is the one plain go
// test prints for it when it ends: "ok" or "FAIL", with its tab.
func isResultLine(l string) bool {
	return strings.HasPrefix(l, "ok  \t") || strings.HasPrefix(l, "FAIL\t")
}

// isProgressLine reports whether a line is one of -v's progress markers, which
// plain go test does not print.
func isProgressLine(l string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(strings.TrimLeft(l, " "), p) {
			return true
		}
	}
	return l == "PASS\n"
}
