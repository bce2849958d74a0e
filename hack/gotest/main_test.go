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
func TestSlow(t *testing.T) { time.Sleep(1200 * time.Millisecond); t.Log("slow log line") }
`,
		"bad/bad_test.go": `package bad
import "testing"
func TestPasses(t *testing.T) { t.Log("passing log line") }
func TestBroken(t *testing.T) { t.Log("broken log line"); t.Fatal("broken on purpose") }
func TestParent(t *testing.T) {
	t.Run("fine", func(t *testing.T) { t.Log("fine subtest line") })
	t.Run("wrong", func(t *testing.T) { t.Error("subtest broken on purpose") })
}
`,
		"none/none.go": "package none\n",
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

	cmd := exec.Command(bin, "-slow=1s", "-top=2", "--", "-count=1", "./...")
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
		"slowest 2 of 5 top-level tests:",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, unwanted := range []string{
		"quiet log line", "slow log line", "passing log line", // passing tests' output
		"--- PASS: TestQuiet", // under -slow
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

	// Everything passing: status 0.
	cmd = exec.Command(bin, "--", "-count=1", "./good")
	cmd.Dir = dir
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("a passing run: %v\n%s", err, out)
	}
}
