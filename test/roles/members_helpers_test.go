package roles

import (
	"net"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/inventory"
)

// memberInventory writes kao's inventory of kd with each member's kubeconfig
// at kubeconfigs[name], as the operator writes it into its run directory.
func (a *ansible) memberInventory(t *testing.T, name string, kd *kaov1.KarmadaDeployment, kubeconfigs map[string]string) string {
	t.Helper()
	if kd.UID == "" {
		kd.UID = roleTestUID // as a.inventory: one deployment's inventories
	}
	inv, err := inventory.Build(kd, inventory.Options{MemberKubeconfigPath: func(m string) string { return kubeconfigs[m] }})
	if err != nil {
		t.Fatal(err)
	}
	data, err := inv.FileJSON()
	if err != nil {
		t.Fatal(err)
	}
	return a.writeFile(t, name, data)
}

// longPlaybookTimeout bounds a members.yml run: joins wait for Clusters to
// be Ready, unjoins for Karmada to let go, on a machine busy with other tests.
const longPlaybookTimeout = 15 * time.Minute

// playbookLong is playbook with longPlaybookTimeout.
func (a *ansible) playbookLong(t testing.TB, inventoryPath, extraVarsPath, playbook string) run {
	t.Helper()
	return a.playbookWithin(t, longPlaybookTimeout, inventoryPath, extraVarsPath, playbook)
}

// eventually polls cond every two seconds until it holds or timeout passes,
// then fails t with what cond last said.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last: %s", what, timeout, last)
		}
		time.Sleep(2 * time.Second)
	}
}

// brokenKubeconfig rewrites a member kubeconfig: its CA replaced by ca
// (when not nil) and its server by server (when not empty).
func brokenKubeconfig(t *testing.T, kubeconfig, ca []byte, server string) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		if ca != nil {
			c.CertificateAuthorityData = ca
		}
		if server != "" {
			c.Server = server
		}
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// decoyKubeconfig adds a context for server, with kubeconfig's own CA and
// credentials, and makes it the current one: only a run that honours the
// member's context reaches the member.
func decoyKubeconfig(t *testing.T, kubeconfig []byte, server string) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	current := cfg.Contexts[cfg.CurrentContext]
	decoy := cfg.Clusters[current.Cluster].DeepCopy()
	decoy.Server = server
	cfg.Clusters["decoy"] = decoy
	cfg.Contexts["decoy"] = &clientcmdapi.Context{Cluster: "decoy", AuthInfo: current.AuthInfo}
	cfg.CurrentContext = "decoy"
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// closedPort returns a port on address that nothing listens on right now.
func closedPort(t *testing.T, address string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(address, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}
