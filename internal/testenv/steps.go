package testenv

// Helpers that the role tests (test/roles) and the end-to-end tests (test/e2e)
// share: one implementation each, instead of a closure per test.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// KubectlTimeout bounds one kubectl call of the tests.
const KubectlTimeout = 60 * time.Second

// Step runs f as the subtest name of t and stops t when it fails: the steps of
// a scenario build on each other, so the ones after a failed step would only
// fail for its reason.
func Step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}

// Kubectl runs kubectl (bin) with kubeconfig and returns its stdout; the error
// carries stderr. One call takes at most KubectlTimeout.
func Kubectl(ctx context.Context, bin, kubeconfig string, args ...string) (string, error) {
	return KubectlInput(ctx, bin, kubeconfig, "", args...)
}

// KubectlInput runs kubectl like Kubectl, with stdin as its standard input
// (a manifest for `create -f -`).
func KubectlInput(ctx context.Context, bin, kubeconfig, stdin string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	if err := kubectl(ctx, bin, kubeconfig, stdin, &stdout, &stderr, args); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// MustKubectl runs kubectl like Kubectl and returns its stdout and stderr in
// one, as a person reads them (kubectl writes "No resources found" to
// stderr); it fails t on error, naming the kubeconfig.
func MustKubectl(ctx context.Context, t testing.TB, bin, kubeconfig string, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := kubectl(ctx, bin, kubeconfig, "", &out, &out, args); err != nil {
		t.Fatalf("kubectl %s with %s: %v\n%s", strings.Join(args, " "), kubeconfig, err, out.String())
	}
	return out.String()
}

func kubectl(ctx context.Context, bin, kubeconfig, stdin string, stdout, stderr io.Writer, args []string) error {
	ctx, cancel := context.WithTimeout(ctx, KubectlTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd.Run()
}
