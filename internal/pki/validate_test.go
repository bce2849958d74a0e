package pki

import (
	"maps"
	"strings"
	"testing"
)

func TestValidateFindsBrokenBundles(t *testing.T) {
	good := fresh(t)
	tests := []struct {
		name    string       // what is wrong with the bundle
		breakI  func(Bundle) // the damage
		wantErr string       // part of the error; empty for a valid bundle
	}{
		{name: "fresh bundle is valid", breakI: func(Bundle) {}},
		{
			name:    "key of another certificate",
			breakI:  func(b Bundle) { b[KeyFile(AdminClient)] = b[KeyFile(SchedulerClient)] },
			wantErr: "admin-client.crt is not matching its key",
		},
		{
			name: "leaf signed by the wrong CA",
			breakI: func(b Bundle) {
				b[CertFile(FrontProxyClient)], b[KeyFile(FrontProxyClient)] = b[CertFile(AdminClient)], b[KeyFile(AdminClient)]
			},
			wantErr: "front-proxy-client.crt does not chain to front-proxy-ca.crt",
		},
		{
			name:    "etcd leaf whose CA is gone",
			breakI:  func(b Bundle) { delete(b, CertFile(EtcdCA)); delete(b, KeyFile(EtcdCA)) },
			wantErr: "etcd-server-e1.crt: its CA etcd-ca.crt is not in the bundle",
		},
		{
			name:    "CA that is a leaf",
			breakI:  func(b Bundle) { b[CertFile(CA)], b[KeyFile(CA)] = b[CertFile(AdminClient)], b[KeyFile(AdminClient)] },
			wantErr: "ca.crt is not a CA",
		},
		{
			name:    "key without certificate",
			breakI:  func(b Bundle) { delete(b, CertFile(WebhookServer)) },
			wantErr: "karmada-webhook-server.key has no certificate",
		},
		{
			name:    "certificate without key",
			breakI:  func(b Bundle) { delete(b, KeyFile(WebhookServer)) },
			wantErr: "karmada-webhook-server.crt is missing its key",
		},
		{
			name:    "sa.pub of another key",
			breakI:  func(b Bundle) { b[ServiceAccountPubFile] = []byte(strings.Repeat("x", 3)) },
			wantErr: "sa.pub is not the public key of sa.key",
		},
		{
			name:    "sa.key alone",
			breakI:  func(b Bundle) { delete(b, ServiceAccountPubFile) },
			wantErr: "must come together",
		},
		{
			name:    "stray file",
			breakI:  func(b Bundle) { b["kubeconfig"] = []byte("x") },
			wantErr: "kubeconfig is not a file of a certificate bundle",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := maps.Clone(good)
			tc.breakI(b)
			err := b.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
