package roles

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKaoClientError feeds the kao_client_error filter the failed results a
// kubernetes.core task leaves when an API server refuses or cannot be
// reached, and checks the one line a person gets: the status and the
// server's message, or the connection's cause; never the traceback, the
// headers or a token.
func TestKaoClientError(t *testing.T) {
	requirePrerequisites(t)
	const traceback = "Traceback (most recent call last):\n  File \"/tmp/x.py\", line 9, in <module>\n    raise ApiException(http_resp=r)\n"
	cases := []struct {
		name   string
		result map[string]any
		want   string
	}{
		{"an API error with its Status", map[string]any{"module_stderr": traceback +
			"kubernetes.client.exceptions.ApiException: (401)\nReason: Unauthorized\nHTTP response headers: HTTPHeaderDict({'Audit-Id': 'a1', 'Authorization': 'Bearer s3cr3t-token'})\n" +
			`HTTP response body: {"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}` + "\n\n",
			"msg": "MODULE FAILURE\nSee stdout/stderr for the exact error"},
			"HTTP 401 Unauthorized: Unauthorized"},
		{"a forbidden read", map[string]any{"msg": "Failed to retrieve requested object: (403)\nReason: Forbidden\nHTTP response headers: HTTPHeaderDict({})\n" +
			`HTTP response body: {"kind":"Status","message":"namespaces \"kube-system\" is forbidden: User \"edge\" cannot get resource \"namespaces\"","code":403}`},
			`HTTP 403 Forbidden: namespaces "kube-system" is forbidden: User "edge" cannot get resource "namespaces"`},
		{"nothing listening", map[string]any{"module_stderr": traceback + "urllib3.exceptions.MaxRetryError: HTTPSConnectionPool(host='10.0.0.1', port=6443): Max retries exceeded with url: /api/v1/namespaces/kube-system " +
			"(Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused'))\n"},
			"cannot connect: Connection refused"},
		{"a server the CA does not vouch for", map[string]any{"module_stderr": traceback + "urllib3.exceptions.MaxRetryError: HTTPSConnectionPool(host='10.0.0.1', port=6443): " +
			"(Caused by SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate (_ssl.c:1006)')))\n"},
			"cannot connect: certificate verify failed: unable to get local issuer certificate"},
		{"a plain message", map[string]any{"msg": "kubeconfig file not found\nmore"}, "kubeconfig file not found"},
		{"nothing useful", map[string]any{"module_stderr": traceback, "msg": "MODULE FAILURE"}, "the client failed without saying why"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vars, err := json.Marshal(map[string]any{"r": c.result})
			if err != nil {
				t.Fatal(err)
			}
			varsFile := filepath.Join(dir, "vars.json")
			if err := os.WriteFile(varsFile, vars, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("ansible", "localhost", "-m", "debug", "-a", "msg={{ r | kao_client_error }}", "-e", "@"+varsFile)
			cmd.Env = append(os.Environ(), "ANSIBLE_FILTER_PLUGINS="+filepath.Join(repoRoot(t), "roles", "kao_common", "filter_plugins"),
				"ANSIBLE_LOAD_CALLBACK_PLUGINS=1", "ANSIBLE_STDOUT_CALLBACK=json", "ANSIBLE_LOCALHOST_WARNING=0")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("ansible: %v\n%s", err, out)
			}
			var report struct {
				Plays []struct {
					Tasks []struct {
						Hosts map[string]struct {
							Msg string `json:"msg"`
						} `json:"hosts"`
					} `json:"tasks"`
				} `json:"plays"`
			}
			if err := json.Unmarshal(out, &report); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			got := strings.TrimSpace(report.Plays[0].Tasks[0].Hosts["localhost"].Msg)
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
			for _, never := range []string{"Traceback", "raise ApiException", "s3cr3t-token", "Audit-Id"} {
				if strings.Contains(got, never) {
					t.Errorf("the line shows %q: %q", never, got)
				}
			}
		})
	}
}
