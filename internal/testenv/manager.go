package testenv

import (
	"context"
	"errors"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// LogBuffer collects log output from many goroutines, for tests that scan
// what the operator logged.
type LogBuffer struct {
	mu   sync.Mutex
	data []byte
}

// Write implements io.Writer.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.data = append(b.data, p...)
	return len(p), nil
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.data)
}

// StateDir makes a short state directory for an operator under test (SSH
// control sockets and run directories live below it) and removes it when the
// test ends.
func StateDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "kao-state-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// StartManager starts a controller manager that watches one namespace, after
// setup registered its controllers. Several may run in one test binary. The
// returned stop function (also run when the test ends) stops it and waits.
func (e *Env) StartManager(t testing.TB, scheme *runtime.Scheme, ns string, setup func(ctrl.Manager) error) (stop func()) {
	t.Helper()
	return StartManagerAs(t, e.Config, scheme, []string{ns}, setup)
}

// shutdownGrace bounds how long a test's manager waits for its runnables to
// end when it stops.
const shutdownGrace = 2 * time.Minute

// StartManagerAs is StartManager for a manager that reaches the API server
// with cfg (a user with only some permissions) and watches namespaces, or
// every namespace when there are none.
func StartManagerAs(t testing.TB, cfg *rest.Config, scheme *runtime.Scheme, namespaces []string, setup func(ctrl.Manager) error) (stop func()) {
	t.Helper()
	skipNameValidation := true
	cacheOpts := cache.Options{}
	if len(namespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	// A test's manager stops at its end; on a machine loaded by the rest of
	// the suite a probe or a run in flight took longer than
	// controller-runtime's default 30 s to end (TestBadInputCorpus failed so
	// once in CI). A runnable that never stops still fails the test.
	grace := shutdownGrace
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		GracefulShutdownTimeout: &grace,
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		Cache:                   cacheOpts,
		Logger:                  ctrl.Log.WithName(loggerName(namespaces)),
		Controller:              config.Controller{SkipNameValidation: &skipNameValidation},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
			if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "grace period") {
				// A runnable did not stop within the grace period: say
				// where every goroutine of the test binary is waiting.
				var stacks strings.Builder
				_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
				t.Logf("goroutines when the manager gave up stopping:\n%s", stacks.String())
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// loggerName names a test manager's logger after what it watches.
func loggerName(namespaces []string) string {
	if len(namespaces) == 0 {
		return "every-namespace"
	}
	return strings.Join(namespaces, ",")
}

// Namespace creates a namespace with a generated name for one test.
func Namespace(t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// WaitReleased waits until obj is gone from the API server, or its name
// belongs to another object (one created again since), and fails t after
// timeout.
func WaitReleased(t testing.TB, c client.Client, obj client.Object, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := obj.DeepCopyObject().(client.Object)
		err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), cur)
		if apierrors.IsNotFound(err) || err == nil && cur.GetUID() != obj.GetUID() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s (uid %s) was not released within %s after its deletion (%v)",
				obj.GetObjectKind().GroupVersionKind().Kind, client.ObjectKeyFromObject(obj), obj.GetUID(), timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
