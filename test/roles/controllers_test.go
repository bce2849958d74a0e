package roles

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/test/hosts"
)

// controllerServices are the services the karmada_controllers role installs.
var controllerServices = []string{"kube-controller-manager", "karmada-controller-manager", "karmada-scheduler", "karmada-webhook"}

// TestKarmadaControllers installs managed etcd on three hosts,
// karmada-apiserver on the first two and the controllers on the last two,
// applies Karmada's CRDs from this machine in between, and proves that every
// controller runs on both control-plane hosts, that kube-controller-manager
// issues service-account tokens, that the components elect leaders, that a
// second run changes nothing, and that the uninstall removes the controllers.
func TestKarmadaControllers(t *testing.T) {
	requirePrerequisites(t)
	bundle, m := buildBundle(t)
	kubectl := filepath.Join(bundle, "kubernetes", m.Kubernetes, "bin", "kubectl")
	dc := hosts.Start(t, 3)
	hs := dc.Hosts()
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.Name
	}
	apiHosts, cpHosts := hs[:2], hs[1:]
	cpNames := names[1:]
	ctx := context.Background()
	bundlePKI, pkiDir := genControllersPKI(t, hs, apiHosts, cpHosts)
	a := newAnsible(t, dc)
	base := testdataPath(t, "controllers-base.yml")
	install := testdataPath(t, "controllers-install.yml")
	uninstall := testdataPath(t, "controllers-uninstall.yml")
	vars := a.extraVars(t, "vars.json", map[string]string{"kao_artifacts_dir": bundle, "kao_pki_dir": pkiDir})
	inv := a.inventory(t, "inventory.json", controllersDeployment(hs, apiHosts, cpHosts))

	kc, err := bundlePKI.Kubeconfig(pki.AdminClient, apiURL(apiHosts[0]))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := a.writeFile(t, "admin.kubeconfig", kc)
	// kubectlRun runs the bundle's kubectl against the first API server and
	// returns its combined output.
	kubectlRun := func(t *testing.T, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	step := func(name string, f func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	step("installs etcd and karmada-apiserver", func(t *testing.T) {
		a.playbook(t, inv, vars, base).mustSucceed(t, names...)
	})

	step("applies Karmada's CRDs and namespace", func(t *testing.T) {
		crds := t.TempDir()
		tarball := filepath.Join(bundle, "karmada", m.Karmada, "crds.tar.gz")
		if out, err := exec.Command("tar", "-xzf", tarball, "-C", crds).CombinedOutput(); err != nil {
			t.Fatalf("tar -xzf %s: %v\n%s", tarball, err, out)
		}
		kubectlRun(t, "apply", "--server-side", "-R", "-f", filepath.Join(crds, "crds", "bases"))
		kubectlRun(t, "create", "namespace", "karmada-system")
		kubectlRun(t, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
	})

	step("installs the controllers on the control-plane hosts", func(t *testing.T) {
		r := a.playbook(t, inv, vars, install)
		r.mustSucceed(t, cpNames...)
		for _, task := range []string{
			"TASK [karmada_controllers : Karmada controllers | Wait for the services to be healthy]",
			"TASK [karmada_controllers : Karmada controllers | Wait for the services to be reachable]",
		} {
			if !strings.Contains(r.out, task) {
				t.Errorf("the run did not reach %q:\n%s", task, r.out)
			}
		}
		for _, h := range cpNames {
			if r.recap[h].Changed == 0 {
				t.Errorf("the first run changed nothing on %s: %+v", h, r.recap[h])
			}
		}
		if _, ok := r.recap[names[0]]; ok {
			t.Errorf("the role ran on %s, which is not a control-plane host", names[0])
		}
	})

	step("runs every controller on both control-plane hosts", func(t *testing.T) {
		for _, h := range cpNames {
			out, err := dc.Run(ctx, h, "systemctl is-active "+strings.Join(controllerServices, " ")+" || true")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Fields(out); !slices.Equal(got, []string{"active", "active", "active", "active"}) {
				t.Errorf("%s: %v are %q, want all active", h, controllerServices, got)
			}
			out, err = dc.Run(ctx, h, "stat -c '%n %a %U' /etc/karmada/controllers/pki/* /etc/karmada/controllers/karmada-webhook/* "+
				"/etc/karmada/controllers/*.kubeconfig")
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(line)
				want := "644"
				if strings.HasSuffix(f[0], ".key") || strings.HasSuffix(f[0], ".kubeconfig") {
					want = "600"
				}
				if len(f) != 3 || f[1] != want || f[2] != "root" {
					t.Errorf("%s: %q, want mode %s owner root", h, line, want)
				}
			}
		}
		out, err := dc.Run(ctx, names[0], "ls /etc/systemd/system/ | grep -E 'controller-manager|karmada-scheduler|karmada-webhook' || true")
		if err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("%s got controller units although it is not a control-plane host: %q, %v", names[0], out, err)
		}
		argv := processArgv(ctx, t, dc, cpNames[0], "kube-controller-manager")
		for _, want := range []string{
			"--cluster-signing-key-file=/etc/karmada/controllers/pki/ca.key",
			"--service-cluster-ip-range=10.96.0.0/12",
			"--cluster-name=karmada",
		} {
			if !slices.Contains(argv, want) {
				t.Errorf("kube-controller-manager did not get %q; its argv is %q", want, argv)
			}
		}
	})

	step("kube-controller-manager issues service-account tokens", func(t *testing.T) {
		kubectlRun(t, "create", "namespace", "kao-tokens")
		kubectlRun(t, "-n", "kao-tokens", "create", "serviceaccount", "probe")
		secret := a.writeFile(t, "token-secret.yaml", []byte(`apiVersion: v1
kind: Secret
metadata:
  name: probe-token
  namespace: kao-tokens
  annotations:
    kubernetes.io/service-account.name: probe
type: kubernetes.io/service-account-token
`))
		kubectlRun(t, "apply", "-f", secret)
		deadline := time.Now().Add(60 * time.Second)
		for {
			token := kubectlRun(t, "-n", "kao-tokens", "get", "secret", "probe-token", "-o", "jsonpath={.data.token}")
			if token != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the service-account token controller did not fill kao-tokens/probe-token within 60s")
			}
			time.Sleep(2 * time.Second)
		}
	})

	step("elects leaders", func(t *testing.T) {
		for _, lease := range []struct{ namespace, name string }{
			{"kube-system", "kube-controller-manager"},
			{"karmada-system", "karmada-controller-manager"},
			{"karmada-system", "karmada-scheduler"},
		} {
			holder := kubectlRun(t, "-n", lease.namespace, "get", "lease", lease.name, "-o", "jsonpath={.spec.holderIdentity}")
			if !slices.ContainsFunc(cpNames, func(h string) bool { return strings.HasPrefix(holder, h) }) {
				t.Errorf("lease %s/%s is held by %q, want one of %v", lease.namespace, lease.name, holder, cpNames)
			}
		}
	})

	step("second run changes nothing", func(t *testing.T) {
		r := a.playbook(t, inv, vars, install)
		r.mustSucceed(t, cpNames...)
		for _, h := range cpNames {
			if r.recap[h].Changed != 0 {
				t.Errorf("the second run changed %d things on %s:\n%s", r.recap[h].Changed, h, r.out)
			}
		}
	})

	step("refuses an extra arg the role manages", func(t *testing.T) {
		bad := controllersDeployment(hs, apiHosts, cpHosts)
		bad.Spec.Components.KubeControllerManager.ExtraArgs = []kaov1.Arg{{Name: "cluster-signing-key-file", Value: "/tmp/other.key"}}
		r := a.playbook(t, a.inventory(t, "inventory-bad.json", bad), vars, install)
		if r.err == nil {
			t.Fatalf("the install accepted --cluster-signing-key-file as an extra arg:\n%s", r.out)
		}
		if !strings.Contains(r.out, "--cluster-signing-key-file is not a flag the karmada_controllers role can pass on to kube-controller-manager") {
			t.Errorf("the failure does not name the flag:\n%s", r.out)
		}
	})

	step("uninstalls", func(t *testing.T) {
		a.playbook(t, inv, vars, uninstall).mustSucceed(t, cpNames...)
		for _, h := range cpNames {
			out, err := dc.Run(ctx, h, "for s in "+strings.Join(controllerServices, " ")+"; do "+
				"test ! -e /etc/systemd/system/$s.service || echo $s.service; systemctl is-active $s || true; done; "+
				"test ! -e /etc/karmada/controllers || echo /etc/karmada/controllers")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Fields(out); !slices.Equal(got, []string{"inactive", "inactive", "inactive", "inactive"}) {
				t.Errorf("%s still has controllers after the uninstall: %q", h, got)
			}
		}
		// karmada-apiserver on the shared host is untouched.
		kubectlRun(t, "get", "--raw", "/readyz")
	})
}

// testdataPath is the absolute path of a file in testdata: ansible-playbook
// runs in the runner's directory.
func testdataPath(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// genControllersPKI issues kao's PKI with internal/pki for etcd on every
// host, the API server on apiHosts and the controllers on cpHosts, and writes
// it flat into a directory, as the operator writes kao_pki_dir.
func genControllersPKI(t *testing.T, hs, apiHosts, cpHosts []hosts.Host) (pki.Bundle, string) {
	t.Helper()
	toPKI := func(hs []hosts.Host) []pki.Host {
		out := make([]pki.Host, len(hs))
		for i, h := range hs {
			out[i] = pki.Host{Name: h.Name, Address: h.Address}
		}
		return out
	}
	b, _, _, err := pki.Ensure(nil, pki.Request{
		EtcdHosts:         toPKI(hs),
		APIServerHosts:    toPKI(apiHosts),
		ControlPlaneHosts: toPKI(cpHosts),
		Endpoint:          apiHosts[0].Address + ":5443",
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range b {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return b, dir
}

// controllersDeployment is a Binary KarmadaDeployment with managed etcd on hs,
// karmada-apiserver on apiHosts and the controllers on cpHosts.
func controllersDeployment(hs, apiHosts, cpHosts []hosts.Host) *kaov1.KarmadaDeployment {
	kd := apiServerDeployment(hs, apiHosts)
	for i := range kd.Spec.Hosts {
		if slices.ContainsFunc(cpHosts, func(h hosts.Host) bool { return h.Name == kd.Spec.Hosts[i].Name }) {
			kd.Spec.Hosts[i].Roles = append(kd.Spec.Hosts[i].Roles, kaov1.ControlPlaneRole)
		}
	}
	return kd
}
