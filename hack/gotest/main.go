// Command gotest runs `go test -json` with the arguments it is given and
// prints what a plain `go test` over several packages prints: one result line
// per package, and the whole output of a package or test that failed. Two
// things are added, so that a long suite says where its time goes:
//
//   - as each top-level test that ran longer than -slow ends, a line naming it,
//     its package and its time;
//   - at the end, the slowest top-level tests of the run.
//
// It exits with go test's exit status. make test runs the suite through it:
//
//	go run ./hack/gotest -slow=30s -- -count=1 ./...
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

func main() {
	slow := flag.Duration("slow", 30*time.Second, "print a line for each top-level test that ran at least this long")
	top := flag.Int("top", 25, "how many of the slowest tests to list at the end")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: gotest [-slow D] [-top N] [--] go-test-arguments...")
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
}

func newSummary(w io.Writer, slow time.Duration) *summary {
	return &summary{w: w, slow: slow, held: map[string][]string{}, resultLine: map[string]string{}}
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
	switch e.Action {
	case "build-output":
		s.print(e.Output)
		return
	case "build-fail":
		s.failed = true
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
			return // a subtest: its output stays with its top-level test
		}
		if e.Action == "fail" {
			s.failed = true
			s.flush(key)
			if e.Test == "" {
				s.flushPackage(e.Package)
			}
		}
		delete(s.held, key)
		if e.Test == "" {
			s.print(s.resultLine[e.Package])
			delete(s.resultLine, e.Package)
			return
		}
		r := result{pkg: e.Package, test: e.Test, elapsed: time.Duration(e.Elapsed * float64(time.Second))}
		s.results = append(s.results, r)
		if e.Action != "fail" && r.elapsed >= s.slow {
			s.printf("--- %s: %s (%.2fs) in %s\n", strings.ToUpper(e.Action), e.Test, e.Elapsed, e.Package)
		}
	}
}

// flush prints the output held for key.
func (s *summary) flush(key string) {
	for _, l := range s.held[key] {
		s.print(l)
	}
}

// flushPackage prints the output still held for a failed package's tests
// (those that had not ended: a timeout or a crash stops them), then its own.
func (s *summary) flushPackage(pkg string) {
	var keys []string
	for k := range s.held {
		if strings.HasPrefix(k, pkg+"\x00") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.flush(k)
		delete(s.held, k)
	}
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
