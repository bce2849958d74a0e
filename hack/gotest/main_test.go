package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSummaryOfARealRun runs the command over a real go test of a small module
// with a passing, a slow, a failing and a failing-subtest test, and checks
// what is shown, what is not, and the exit status.
func TestSummaryOfARealRun(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.22\n",
		"good/good_test.go": `package good
import ("testing"; "time")
func TestQuiet(t *testing.T) { t.Log("quiet log line") }
func TestSlow(t *testing.T) {
	t.Run("slow step", func(t *testing.T) { time.Sleep(1100 * time.Millisecond) })
	t.Run("quick step", func(t *testing.T) {})
	t.Log("slow log line")
}
`,
		"bad/bad_test.go": `package bad
import "testing"
func TestPasses(t *testing.T) { t.Log("passing log line") }
func TestBroken(t *testing.T) { t.Log("broken log line"); t.Fatal("broken on purpose") }
func TestParent(t *testing.T) {
	t.Run("fine", func(t *testing.T) { t.Log("fine subtest line") })
	t.Run("wrong", func(t *testing.T) { t.Error("subtest broken on purpose") })
}
func TestCleanedUp(t *testing.T) {
	t.Cleanup(func() { harnessLog(t, "torn down") })
	t.Log("step one done")
	t.Fatal("no result after 5m0s")
}
`,
		// A harness's file: what it logs is not the test's own line.
		"bad/harness.go": "package bad\nimport \"testing\"\nfunc harnessLog(t *testing.T, s string) { t.Log(s) }\n",
		"none/none.go":   "package none\n",
		// Not in the first run, which names its packages.
		"broken/broken_test.go": "package broken\nimport \"testing\"\nfunc TestX(t *testing.T) { undefined() }\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "gotest")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building gotest: %v\n%s", err, out)
	}

	cmd := exec.Command(bin, "-slow=1s", "-top=2", "--", "-count=1", "./good", "./bad", "./none")
	cmd.Dir = dir
	out, err := cmd.Output()
	text := string(out)
	t.Logf("output:\n%s", text)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: got %v, want go test's status 1", err)
	}
	for _, want := range []string{
		"ok  \texample.com/m/good",
		"FAIL\texample.com/m/bad",
		"?   \texample.com/m/none",
		"broken on purpose",
		"broken log line",
		"subtest broken on purpose",
		"--- PASS: TestSlow (", // over -slow
		"s) in example.com/m/good, ended at +",
		"      step slow_step (1s)\n",
		"slowest 2 of 6 top-level tests:",
		"failed (3):\n",
		"  FAIL example.com/m/bad TestBroken: bad_test.go:4: broken on purpose\n",
		"  FAIL example.com/m/bad TestParent: TestParent/wrong: bad_test.go:7: subtest broken on purpose\n",
		"  FAIL example.com/m/bad TestCleanedUp: bad_test.go:12: no result after 5m0s\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, unwanted := range []string{
		"quiet log line", "slow log line", "passing log line", // passing tests' output
		"--- PASS: TestQuiet", // under -slow
		"quick_step",
		"=== RUN",
	} {
		if strings.Contains(text, unwanted) {
			t.Errorf("output has %q", unwanted)
		}
	}
	// A package's result line comes after the output shown for it.
	if strings.Index(text, "broken on purpose") > strings.Index(text, "FAIL\texample.com/m/bad") {
		t.Error("the failed package's result line comes before its failures")
	}
	if !strings.Contains(text[strings.Index(text, "slowest"):], "TestSlow") {
		t.Error("TestSlow is not among the slowest")
	}
	// What failed ends the output, and goes to -failures' file too.
	if i := strings.Index(text, "failed (3):"); i < 0 || strings.Contains(text[i:], "slowest") {
		t.Error("the failures are not the last thing printed")
	}
	failures := filepath.Join(t.TempDir(), "failures")
	if err := os.WriteFile(failures, []byte("earlier line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin, "-failures="+failures, "--", "-count=1", "./bad", "./broken")
	cmd.Dir = dir
	_, _ = cmd.Output()
	got, err := os.ReadFile(failures)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"earlier line\n", "FAIL example.com/m/bad TestBroken: ", "FAIL example.com/m/broken (build failed)"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("-failures file lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(string(got), "example.com/m/bad") != 3 {
		t.Errorf("-failures file: want a line for each of bad's three failed tests and none for the package:\n%s", got)
	}

	// Everything passing: status 0.
	cmd = exec.Command(bin, "--", "-count=1", "./good")
	cmd.Dir = dir
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("a passing run: %v\n%s", err, out)
	}
}
