package pipeline

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/pki"
)

// externalEtcdFiles are where an external etcd's CA and client certificate
// go in a run's PKI directory: the names the roles read for managed etcd, so
// karmada-apiserver, karmada-aggregated-apiserver and karmada-search need no
// second layout.
var externalEtcdFiles = struct {
	ca      string
	clients []string
}{
	ca:      "etcd-ca.crt",
	clients: []string{"karmada-apiserver-etcd-client", "karmada-aggregated-apiserver-etcd-client", "karmada-search-etcd-client"},
}

// ExternalEtcd is the material to reach an etcd cluster kao does not manage.
type externalEtcd struct {
	ca       []byte
	certPEM  []byte
	keyPEM   []byte
	Endpoint map[string]string // name (host:port) → client URL
}

// ReadExternalEtcd reads and checks the CA and client certificate named in
// spec.etcd.external. Bad material is a reason.Missing that names the Secret
// and what is wrong, never its content.
func (g *Gatherer) ReadExternalEtcd(ctx context.Context, kd *kaov1.KarmadaDeployment) (*externalEtcd, error) {
	ext := kd.Spec.Etcd.External
	if ext == nil {
		return nil, nil
	}
	ca, err := g.secretValue(ctx, kd.Namespace, ext.CASecretRef, "spec.etcd.external.caSecretRef")
	if err != nil {
		return nil, err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(ca) {
		return nil, reason.Missing("Secret %s/%s key %q named in spec.etcd.external.caSecretRef holds no PEM certificate",
			kd.Namespace, ext.CASecretRef.Name, ext.CASecretRef.Key)
	}
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: kd.Namespace, Name: ext.ClientCertSecretName}
	if err := g.APIReader.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, reason.Missing("Secret %s named in spec.etcd.external.clientCertSecretName does not exist", key)
		}
		return nil, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	crt, keyPEM := secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(keyPEM) == 0 {
		return nil, reason.Missing("Secret %s named in spec.etcd.external.clientCertSecretName needs the keys %s and %s",
			key, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	if _, err := tls.X509KeyPair(crt, keyPEM); err != nil {
		return nil, reason.Missing("Secret %s named in spec.etcd.external.clientCertSecretName does not hold a matching PEM certificate and key (tls.crt, tls.key)", key)
	}
	e := &externalEtcd{ca: ca, certPEM: crt, keyPEM: keyPEM, Endpoint: map[string]string{}}
	for _, ep := range ext.Endpoints {
		u, err := url.Parse(ep)
		if err != nil {
			return nil, reason.Missing("spec.etcd.external.endpoints: %q is not a URL", ep)
		}
		e.Endpoint[u.Host] = ep
	}
	return e, nil
}

// WithExternalEtcd adds an external etcd's files to a run's PKI bundle
// (a copy: the stored bundle stays kao's own).
func WithExternalEtcd(b pki.Bundle, e *externalEtcd) pki.Bundle {
	if e == nil {
		return b
	}
	out := maps.Clone(b)
	if out == nil {
		out = pki.Bundle{}
	}
	out[externalEtcdFiles.ca] = e.ca
	for _, c := range externalEtcdFiles.clients {
		out[c+".crt"] = e.certPEM
		out[c+".key"] = e.keyPEM
	}
	return out
}

// TLSConfig is the client TLS configuration for probing the external etcd.
func (e *externalEtcd) TLSConfig() (*tls.Config, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.ca)
	cert, err := tls.X509KeyPair(e.certPEM, e.keyPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
