package inventory

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cliFiles are the input files the command-line tests refer to by name.
var cliFiles = map[string]string{
	"wrong-kind.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
	"list.yaml":       "apiVersion: v1\nkind: List\nitems: []\n",
	"typo.yaml": `apiVersion: kao.io/v1alpha1
kind: KarmadaDeployment
metadata: {name: typo, namespace: default}
spec:
  mode: Binary
  version: v1.18.1
  hosts: [{name: a, address: 10.0.0.1, prot: 22, roles: [apiServer, controlPlane]}]
  etcd: {managed: {}}
`,
	"bad-address.yaml": `apiVersion: kao.io/v1alpha1
kind: KarmadaDeployment
metadata: {name: bad, namespace: default}
spec:
  mode: Binary
  version: v1.18.1
  hosts: [{name: a, address: "10.0.0.1 -oProxyCommand=x", roles: [apiServer, controlPlane]}]
  etcd: {managed: {}}
`,
	"not-yaml.yaml": "spec: [unclosed\n",
}

func TestCommandLine(t *testing.T) {
	bin := inventoryBinary(t)
	dir := t.TempDir()
	for name, content := range cliFiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	minimal, err := filepath.Abs(filepath.Join("testdata", "minimal.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	wantHost, err := mustBuild(t, loadCase(t, "minimal"), Options{}).HostJSON("solo-1")
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name       string   // what the call does
		args       []string // command-line arguments
		env        []string // extra environment, on top of one without KAO_INVENTORY_*
		wantCode   int      // exit code
		wantStdout []byte   // exact stdout, when not nil
		wantStderr []string // substrings stderr must hold: the actionable parts of the message
	}{
		{
			name: "--host prints one host's variables", args: []string{"--host", "solo-1"},
			env: []string{"KAO_INVENTORY_FILE=" + minimal}, wantCode: 0, wantStdout: wantHost,
		},
		{
			name: "--file flag works like the environment", args: []string{"--file", minimal, "--host", "solo-1"},
			wantCode: 0, wantStdout: wantHost,
		},
		{
			name: "no input names both ways to give one", args: []string{"--list"}, wantCode: 2,
			wantStderr: []string{"KAO_INVENTORY_FILE", "KAO_INVENTORY_NAMESPACE", "KAO_INVENTORY_NAME", "--file"},
		},
		{
			name: "neither --list nor --host", args: nil, env: []string{"KAO_INVENTORY_FILE=" + minimal},
			wantCode: 2, wantStderr: []string{"--list", "--host"},
		},
		{
			name: "both --list and --host", args: []string{"--list", "--host", "solo-1"}, env: []string{"KAO_INVENTORY_FILE=" + minimal},
			wantCode: 2, wantStderr: []string{"exactly one of --list and --host"},
		},
		{
			name: "a file and a live object at once", args: []string{"--list", "--name", "dc1"}, env: []string{"KAO_INVENTORY_FILE=" + minimal},
			wantCode: 2, wantStderr: []string{"set only one of"},
		},
		{
			name: "missing file", args: []string{"--list", "--file", "nope.yaml"},
			wantCode: 1, wantStderr: []string{"nope.yaml", "no such file"},
		},
		{
			name: "file of another kind", args: []string{"--list", "--file", "wrong-kind.yaml"},
			wantCode: 1, wantStderr: []string{`kind "ConfigMap"`, "want apiVersion kao.io/v1alpha1, kind KarmadaDeployment"},
		},
		{
			name: "a list instead of one object", args: []string{"--list", "--file", "list.yaml"},
			wantCode: 1, wantStderr: []string{"kubectl get kd NAME -o yaml"},
		},
		{
			name: "misspelt field", args: []string{"--list", "--file", "typo.yaml"},
			wantCode: 1, wantStderr: []string{"typo.yaml", `unknown field "prot"`},
		},
		{
			name: "not YAML", args: []string{"--list", "--file", "not-yaml.yaml"},
			wantCode: 1, wantStderr: []string{"not-yaml.yaml", "YAML or JSON"},
		},
		{
			name: "invalid connection field", args: []string{"--list", "--file", "bad-address.yaml"},
			wantCode: 1, wantStderr: []string{"spec.hosts[0].address", "fix the KarmadaDeployment"},
		},
		{
			name: "unknown host", args: []string{"--host", "nobody"}, env: []string{"KAO_INVENTORY_FILE=" + minimal},
			wantCode: 1, wantStderr: []string{`"nobody"`, "solo-1"},
		},
		{
			name: "live object without a kubeconfig", args: []string{"--list", "--namespace", "default", "--name", "dc1", "--kubeconfig", "/nonexistent/kubeconfig"},
			wantCode: 1, wantStderr: []string{"loading kubeconfig", "/nonexistent/kubeconfig"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Dir = dir
			cmd.Env = append(isolatedEnv(t, t.TempDir()), tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.wantCode, stderr.Bytes())
			}
			if tc.wantStdout != nil && !bytes.Equal(stdout.Bytes(), tc.wantStdout) {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout.Bytes(), tc.wantStdout)
			}
			if tc.wantCode != 0 && stdout.Len() > 0 {
				t.Errorf("a failed call printed to stdout, which Ansible would try to parse:\n%s", stdout.Bytes())
			}
			for _, s := range tc.wantStderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr does not mention %q:\n%s", s, stderr.Bytes())
				}
			}
		})
	}
}
