package controllers

import (
	"strings"
	"testing"
)

func TestMemberKubeconfigProblem(t *testing.T) {
	const good = `apiVersion: v1
kind: Config
current-context: edge
clusters:
- name: edge
  cluster: {server: "https://10.0.0.9:6443"}
- name: no-server
  cluster: {}
users:
- name: admin
  user: {token: s3cr3t-token}
contexts:
- name: edge
  context: {cluster: edge, user: admin}
- name: serverless
  context: {cluster: no-server, user: admin}
- name: nobody
  context: {cluster: edge, user: ghost}
`
	tests := []struct {
		name, data, context, want string
	}{
		{"usable current context", good, "", ""},
		{"usable named context", good, "edge", ""},
		{"not a kubeconfig", "s3cr3t-token: [unclosed", "", "not a kubeconfig (it does not parse)"},
		{"no current context", strings.Replace(good, "current-context: edge\n", "", 1), "",
			"sets no current-context; name one in spec.members[2].context"},
		{"named context missing", good, "other", `no context "other" (spec.members[2].context)`},
		{"current context missing", strings.Replace(good, "current-context: edge", "current-context: gone", 1), "",
			`no context "gone" (its current-context)`},
		{"cluster without server", good, "serverless", `context "serverless" names cluster "no-server", which the kubeconfig does not define with a server`},
		{"user missing", good, "nobody", `context "nobody" names user "ghost", which the kubeconfig does not define`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := memberKubeconfigProblem([]byte(tc.data), tc.context, 2)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if strings.Contains(got, "s3cr3t") {
				t.Errorf("the problem quotes the kubeconfig's content: %q", got)
			}
		})
	}
}
