package roles

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

// controllerServices are the services the karmada_controllers role installs.
var controllerServices = []string{"kube-controller-manager", "karmada-controller-manager", "karmada-scheduler", "karmada-webhook"}

// controllersSteps install the controllers on e.cpHosts, on the plane
// apiServerSteps installed (install.yml's karmada_resources already applied
// Karmada's CRDs, namespaces and pull-mode bootstrap objects), and prove that
// every controller runs on both control-plane hosts, that
// kube-controller-manager issues service-account tokens, that the components
// elect leaders. Then the karmada_resources role wires karmada-webhook in,
// and the steps prove that karmada-apiserver refuses an invalid
// PropagationPolicy with karmada-webhook's verdict, defaults a valid one
// through the mutating webhook, converts bindings through the conversion
// webhook, serves cluster-info (and only it) to anonymous clients, and that a
// bootstrap token from `karmadactl token create` signs cluster-info and may
// request agent certificates.
func controllersSteps(t *testing.T, e *planeEnv) {
	t.Helper()
	kubectl, dc, hs, names, apiHosts, cpHosts, cpNames, a, vars := e.kubectl, e.dc, e.hosts, e.names, e.apiHosts, e.cpHosts, e.cpNames, e.a, e.vars
	ctx := context.Background()
	bundlePKI := e.pki
	install := testdataPath(t, "controllers-install.yml")
	resources := testdataPath(t, "controllers-resources.yml")
	karmadactl := e.karmadactl
	inv := a.inventory(t, "inventory-controllers.json", controllersDeployment(hs, apiHosts, cpHosts))
	kubeconfig := e.admin

	testenv.Step(t, "installs the controllers on the control-plane hosts", func(t *testing.T) {
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

	testenv.Step(t, "runs every controller on both control-plane hosts", func(t *testing.T) {
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

	testenv.Step(t, "kube-controller-manager issues service-account tokens", func(t *testing.T) {
		testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "create", "namespace", "kao-tokens")
		testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "-n", "kao-tokens", "create", "serviceaccount", "probe")
		secret := a.writeFile(t, "token-secret.yaml", []byte(`apiVersion: v1
kind: Secret
metadata:
  name: probe-token
  namespace: kao-tokens
  annotations:
    kubernetes.io/service-account.name: probe
type: kubernetes.io/service-account-token
`))
		testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "apply", "-f", secret)
		deadline := time.Now().Add(60 * time.Second)
		for {
			token := testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "-n", "kao-tokens", "get", "secret", "probe-token", "-o", "jsonpath={.data.token}")
			if token != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the service-account token controller did not fill kao-tokens/probe-token within 60s")
			}
			time.Sleep(2 * time.Second)
		}
	})

	testenv.Step(t, "elects leaders", func(t *testing.T) {
		for _, lease := range []struct{ namespace, name string }{
			{"kube-system", "kube-controller-manager"},
			{"karmada-system", "karmada-controller-manager"},
			{"karmada-system", "karmada-scheduler"},
		} {
			holder := testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "-n", lease.namespace, "get", "lease", lease.name, "-o", "jsonpath={.spec.holderIdentity}")
			if !slices.ContainsFunc(cpNames, func(h string) bool { return strings.HasPrefix(holder, h) }) {
				t.Errorf("lease %s/%s is held by %q, want one of %v", lease.namespace, lease.name, holder, cpNames)
			}
		}
	})

	testenv.Step(t, "wires karmada-webhook in and publishes the bootstrap objects", func(t *testing.T) {
		// Every task runs once, for the play's first host, on this machine.
		r := a.playbook(t, inv, vars, resources)
		r.mustSucceed(t, names[0])
		for _, task := range []string{
			"TASK [karmada_resources : Karmada resources | Apply cluster-info and the bootstrap RBAC]",
			"TASK [karmada_resources : Karmada resources | Apply the conversion webhook of the binding CRDs]",
			"TASK [karmada_resources : Karmada resources | Wait for karmada-webhook to refuse an invalid PropagationPolicy]",
			"TASK [karmada_resources : Karmada resources | List the bindings through the conversion webhook]",
		} {
			if !strings.Contains(r.out, task) {
				t.Errorf("the run did not reach %q:\n%s", task, r.out)
			}
		}
		if r.recap[names[0]].Changed == 0 {
			t.Errorf("the first run changed nothing: %+v", r.recap)
		}
		// Both webhook configurations name the Service, trust kao's CA and
		// fail closed; the Service's slice lists both control-plane hosts.
		for _, c := range []struct {
			// object is the webhook configuration.
			object string
			// webhooks is how many webhooks Karmada v1.18.1 defines in it.
			webhooks int
		}{
			{"mutatingwebhookconfiguration/mutating-config", 8},
			{"validatingwebhookconfiguration/validating-config", 14},
		} {
			out := testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "get", c.object, "-o",
				`jsonpath={range .webhooks[*]}{.clientConfig.service.name}:{.clientConfig.service.port} {.failurePolicy} {.clientConfig.caBundle}{"\n"}{end}`)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != c.webhooks {
				t.Errorf("%s has %d webhooks, want %d", c.object, len(lines), c.webhooks)
			}
			want := "karmada-webhook:443 Fail " + base64.StdEncoding.EncodeToString(bundlePKI[pki.CertFile(pki.CA)])
			for _, l := range lines {
				if l != want {
					t.Errorf("%s has a webhook %.60q..., want each to call karmada-webhook:443, fail closed and trust kao's CA", c.object, l)
					break
				}
			}
		}
		addrs := testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "-n", "karmada-system", "get", "endpointslice", "karmada-webhook-hosts",
			"-o", "jsonpath={.endpoints[*].addresses[0]} {.ports[0].port}")
		if want := cpHosts[0].Address + " " + cpHosts[1].Address + " 8443"; addrs != want {
			t.Errorf("karmada-webhook's EndpointSlice lists %q, want %q", addrs, want)
		}
		argv := processArgv(ctx, t, dc, apiHosts[0].Name, "karmada-apiserver")
		if !slices.Contains(argv, "--authentication-config=/etc/karmada/karmada-apiserver-authentication.yaml") ||
			!slices.Contains(argv, "--enable-bootstrap-token-auth=true") || slices.Contains(argv, "--anonymous-auth=false") {
			t.Errorf("karmada-apiserver does not limit anonymous requests with its authentication configuration, or lacks bootstrap tokens: %q", argv)
		}
	})

	testenv.Step(t, "karmada-webhook refuses an invalid PropagationPolicy", func(t *testing.T) {
		testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "create", "namespace", webhookTestNamespace)
		out, err := testenv.KubectlInput(ctx, kubectl, kubeconfig, invalidPolicy, "create", "-f", "-")
		if err == nil {
			t.Fatalf("karmada-apiserver stored a PropagationPolicy selecting another namespace:\n%s", out)
		}
		for _, want := range []string{
			`admission webhook "propagationpolicy.karmada.io" denied the request`,
			"namespace of resource selector must be the same as the namespace of the policy",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal does not say %q:\n%v", want, err)
			}
		}
		if out, err := testenv.Kubectl(ctx, kubectl, kubeconfig, "-n", webhookTestNamespace, "get", "propagationpolicy", "kao-invalid"); err == nil ||
			!strings.Contains(err.Error(), "NotFound") {
			t.Errorf("the refused policy exists: %v\n%s", err, out)
		}
	})

	testenv.Step(t, "karmada-webhook accepts and defaults a valid PropagationPolicy", func(t *testing.T) {
		out, err := testenv.KubectlInput(ctx, kubectl, kubeconfig, validPolicy, "create", "-f", "-")
		if err != nil {
			t.Fatalf("karmada-apiserver refused a valid PropagationPolicy: %v\n%s", err, out)
		}
		got := testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "-n", webhookTestNamespace, "get", "propagationpolicy", "kao-valid", "-o",
			`jsonpath={.metadata.labels.propagationpolicy\.karmada\.io/permanent-id}|{.metadata.finalizers}|{.spec.resourceSelectors[0].namespace}`)
		f := strings.Split(got, "|")
		if len(f) != 3 || !uuidPattern.MatchString(f[0]) {
			t.Fatalf("the policy got no permanent-id label from the mutating webhook: %q", got)
		}
		if !strings.Contains(f[1], "karmada.io/propagation-policy-controller") {
			t.Errorf("the policy got no finalizer from the mutating webhook: %q", f[1])
		}
		if f[2] != webhookTestNamespace {
			t.Errorf("the mutating webhook did not default the selector's namespace: %q, want %q", f[2], webhookTestNamespace)
		}
	})

	testenv.Step(t, "converts bindings through karmada-webhook", func(t *testing.T) {
		for _, crd := range []string{"resourcebindings.work.karmada.io", "clusterresourcebindings.work.karmada.io"} {
			conv := testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "get", "crd", crd, "-o",
				"jsonpath={.spec.conversion.strategy} {.spec.conversion.webhook.clientConfig.service.name} {.spec.conversion.webhook.clientConfig.service.path}")
			if conv != "Webhook karmada-webhook /convert" {
				t.Errorf("%s converts with %q, want Webhook karmada-webhook /convert", crd, conv)
			}
		}
		if out, err := testenv.KubectlInput(ctx, kubectl, kubeconfig, storedBinding, "create", "-f", "-"); err != nil {
			t.Fatalf("creating a ResourceBinding: %v\n%s", err, out)
		}
		// Stored as v1alpha2: reading it as v1alpha1 calls /convert.
		got := testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "-n", webhookTestNamespace, "get", "resourcebindings.v1alpha1.work.karmada.io", "kao-conversion-probe", "-o",
			`jsonpath={.apiVersion} {.spec.resource.name} {.metadata.labels.resourcebinding\.karmada\.io/permanent-id}`)
		f := strings.Fields(got)
		if len(f) != 3 || f[0] != "work.karmada.io/v1alpha1" || f[1] != "nginx" || !uuidPattern.MatchString(f[2]) {
			t.Errorf("the binding read as v1alpha1 is %q, want work.karmada.io/v1alpha1, its resource and a permanent-id from the mutating webhook", got)
		}
		if out := testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "get", "resourcebindings", "-A"); !strings.Contains(out, "kao-conversion-probe") {
			t.Errorf("kubectl get resourcebindings -A does not list the binding:\n%s", out)
		}
		testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "get", "clusterresourcebindings.v1alpha1.work.karmada.io")
	})

	anon := anonymousClient(t, bundlePKI)
	testenv.Step(t, "serves cluster-info, and only it, to anonymous clients", func(t *testing.T) {
		for _, h := range apiHosts {
			code, body := anonymousGet(ctx, t, anon, apiURL(h)+clusterInfoPath)
			if code != http.StatusOK {
				t.Fatalf("%s: an anonymous GET of cluster-info got %d:\n%s", h.Name, code, body)
			}
			_, kc := parseClusterInfo(t, body)
			if len(kc.Clusters) != 1 || len(kc.Users) != 0 {
				t.Fatalf("%s: cluster-info's kubeconfig has %d clusters and %d users, want one cluster and no credentials", h.Name, len(kc.Clusters), len(kc.Users))
			}
			c := kc.Clusters[0].Cluster
			if want := "https://" + apiHosts[0].Address + ":5443"; c.Server != want {
				t.Errorf("%s: cluster-info names server %q, want the endpoint %q", h.Name, c.Server, want)
			}
			if ca, err := base64.StdEncoding.DecodeString(c.CAData); err != nil || !bytes.Equal(ca, bundlePKI[pki.CertFile(pki.CA)]) {
				t.Errorf("%s: cluster-info's certificate-authority-data is not kao's ca.crt (%v)", h.Name, err)
			}
			for _, path := range []string{"/readyz", "/api/v1/namespaces/kube-public/configmaps", "/api/v1/namespaces/kube-public/configmaps/other"} {
				if code, _ := anonymousGet(ctx, t, anon, apiURL(h)+path); code != http.StatusUnauthorized {
					t.Errorf("%s: an anonymous GET of %s got %d, want 401", h.Name, path, code)
				}
			}
		}
	})

	testenv.Step(t, "bootstrap tokens sign cluster-info and may request agent certificates", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, karmadactl, "token", "create", "--print-register-command", "--kubeconfig", kubeconfig).CombinedOutput()
		match := registerCommand.FindStringSubmatch(string(out))
		if err != nil || match == nil {
			// The output holds a token: show its shape only.
			t.Fatalf("karmadactl token create: %v; output does not read 'register <endpoint> --token <id>.<secret> "+
				"--discovery-token-ca-cert-hash sha256:<hash>' (%d bytes)", err, len(out))
		}
		endpoint, id, secret, pin := match[1], match[2], match[3], match[4]
		if want := apiHosts[0].Address + ":5443"; endpoint != want {
			t.Errorf("the register command names %q, want %q", endpoint, want)
		}
		if want := caPin(t, bundlePKI[pki.CertFile(pki.CA)]); pin != want {
			t.Errorf("the register command pins %s, want kao's CA %s", pin, want)
		}
		// kube-controller-manager's bootstrapsigner signs cluster-info's
		// kubeconfig with the new token; karmadactl register checks that
		// signature before it trusts what it read anonymously.
		deadline := time.Now().Add(60 * time.Second)
		for {
			_, body := anonymousGet(ctx, t, anon, apiURL(apiHosts[0])+clusterInfoPath)
			ci, _ := parseClusterInfo(t, body)
			if sig, ok := ci.Data["jws-kubeconfig-"+id]; ok {
				if err := checkDetachedJWS(sig, ci.Data["kubeconfig"], id, secret); err != nil {
					t.Fatalf("cluster-info's signature for the token does not verify: %v", err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("bootstrapsigner did not sign cluster-info for the new token within 60s")
			}
			time.Sleep(2 * time.Second)
		}
		tokenKC := a.writeFile(t, "bootstrap-token.kubeconfig", tokenKubeconfig(apiURL(apiHosts[0]), bundlePKI[pki.CertFile(pki.CA)], id+"."+secret))
		for _, c := range []struct {
			// args are kubectl auth can-i's arguments.
			args []string
			// want is its answer for the bootstrap token.
			want string
		}{
			{[]string{"create", "certificatesigningrequests.certificates.k8s.io"}, "yes"},
			{[]string{"create", "certificatesigningrequests.certificates.k8s.io", "--subresource=clusteragent"}, "yes"},
			{[]string{"get", "secrets", "-n", "kube-system"}, "no"},
		} {
			out, _ := testenv.Kubectl(ctx, kubectl, tokenKC, append([]string{"auth", "can-i"}, c.args...)...)
			// The answer is the last line; kubectl may warn before it.
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if got := lines[len(lines)-1]; got != c.want {
				t.Errorf("kubectl auth can-i %s as the bootstrap token says %q, want %q", strings.Join(c.args, " "), got, c.want)
			}
		}
		for _, name := range []string{
			"clusterrolebinding/system:karmada:agent-autoapprove-certificate-rotation",
			"clusterrolebinding/system:karmada:agent-rbac-generator",
		} {
			testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "get", name)
		}
	})

	testenv.Step(t, "refuses an extra arg karmada_controllers manages", func(t *testing.T) {
		bad := controllersDeployment(hs, apiHosts, cpHosts)
		bad.Spec.Components.KubeControllerManager.ExtraArgs = []kaov1.Arg{{Name: "cluster-signing-key-file", Value: "/tmp/other.key"}}
		r := a.playbook(t, a.inventory(t, "inventory-bad-controllers.json", bad), vars, install)
		if r.err == nil {
			t.Fatalf("the install accepted --cluster-signing-key-file as an extra arg:\n%s", r.out)
		}
		if !strings.Contains(r.out, "--cluster-signing-key-file is not a flag the karmada_controllers role can pass on to kube-controller-manager") {
			t.Errorf("the failure does not name the flag:\n%s", r.out)
		}
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
