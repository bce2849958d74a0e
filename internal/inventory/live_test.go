package inventory

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
)

// TestLiveObjectMatchesFile reads every testdata input back from a real
// kube-apiserver with kao's CRDs (so the inputs are also proven valid against the
// CRD) and checks that `kao-inventory --namespace --name` prints what the file gives.
func TestLiveObjectMatchesFile(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver (make tools); skipped in -short mode")
	}
	bin := inventoryBinary(t)
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := kaov1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// kaoInventory runs the binary against the test API server; env settings come first so flags can override them.
	kaoInventory := func(t *testing.T, env []string, args ...string) (stdout, stderr []byte, err error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(isolatedEnv(t, t.TempDir()), env...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.Bytes(), errOut.Bytes(), err
	}

	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			fromFile := loadCase(t, tc.name)
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fromFile.Namespace}}
			if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			live := fromFile.DeepCopy()
			live.Status = kaov1.KarmadaDeploymentStatus{}
			if err := c.Create(ctx, live); err != nil {
				t.Fatalf("the API server rejects testdata/%s.yaml, so it is no valid input: %v", tc.name, err)
			}
			if len(fromFile.Status.Members) > 0 {
				live.Status = fromFile.Status
				if err := c.Status().Update(ctx, live); err != nil {
					t.Fatalf("writing status of testdata/%s.yaml: %v", tc.name, err)
				}
			}

			// The API server gives the object its UID, which the inventory carries.
			fromFile.UID = live.UID
			kubeconfigDir := filepath.Join(dir, "members")
			want, err := mustBuild(t, fromFile, Options{MemberKubeconfigPath: memberKubeconfigIn(kubeconfigDir)}).ScriptJSON()
			if err != nil {
				t.Fatal(err)
			}
			// Flags for the object, the environment for the rest, as an ops team would mix them.
			got, stderr, err := kaoInventory(t,
				[]string{"KUBECONFIG=" + kubeconfig, "KAO_INVENTORY_MEMBER_KUBECONFIG_DIR=" + kubeconfigDir},
				"--list", "--namespace", fromFile.Namespace, "--name", fromFile.Name)
			if err != nil {
				t.Fatalf("kao-inventory --list: %v\n%s", err, stderr)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the live object yields another inventory than the file:\nlive:\n%s\nfile:\n%s", got, want)
			}
		})
	}

	t.Run("missing object", func(t *testing.T) {
		_, stderr, err := kaoInventory(t,
			[]string{"KAO_INVENTORY_NAMESPACE=default", "KAO_INVENTORY_NAME=nope"},
			"--list", "--kubeconfig", kubeconfig)
		if err == nil {
			t.Fatal("kao-inventory succeeded for an object that does not exist")
		}
		for _, s := range []string{"default/nope not found", "KAO_INVENTORY_NAME"} {
			if !strings.Contains(string(stderr), s) {
				t.Errorf("stderr does not mention %q:\n%s", s, stderr)
			}
		}
	})
}
