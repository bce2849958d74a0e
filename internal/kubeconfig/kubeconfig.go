// Package kubeconfig reads the kubeconfigs users hand kao (member clusters,
// a host cluster) and writes the only kind kao passes on to its own clients
// and to Ansible: one cluster, one user, one context, every credential
// inline.
//
// A kubeconfig is untrusted input: whoever can write a KarmadaDeployment in
// a namespace chooses it. Client libraries act on much of what one can say
// (run a credential plugin, read a file of the operator's, go through a
// proxy), so Minimize refuses all of that and keeps nothing it did not
// check. Its errors name the offending entry and never quote the file.
package kubeconfig

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Names of the entries of a minimal kubeconfig besides its context, which
// keeps the name it had, so that a context named in a spec still names it.
const (
	ClusterName = "cluster"
	UserName    = "user"
)

// Minimal is a kubeconfig kao wrote from a user's.
type Minimal struct {
	// Data is the kubeconfig file.
	Data []byte
	// Config is Data parsed.
	Config *clientcmdapi.Config
	// Context is the name of its one context, also its current-context.
	Context string
	// Server is the API server's URL.
	Server string
	// Secrets are the credential values in every form a log could show
	// them (raw, base64), and the file itself, for redaction.
	Secrets [][]byte
}

// Minimize checks a user's kubeconfig and rewrites the context named
// context (its current-context when empty) as a minimal kubeconfig.
//
// It refuses a kubeconfig that does not parse, names no usable context,
// runs a credential plugin (exec, auth-provider), reads files (a token file,
// client certificate or key files, a CA file), goes through a proxy, talks
// plain http or skips TLS verification, impersonates, uses a user name and
// password, or carries no credential at all.
func Minimize(data []byte, context string) (*Minimal, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, errors.New("not a kubeconfig (it does not parse)")
	}
	name := context
	if name == "" {
		name = cfg.CurrentContext
		if name == "" {
			return nil, errors.New("the kubeconfig sets no current-context")
		}
	}
	ctx, ok := cfg.Contexts[name]
	if !ok {
		return nil, fmt.Errorf("the kubeconfig has no context %q", name)
	}
	cluster, ok := cfg.Clusters[ctx.Cluster]
	if !ok || cluster.Server == "" {
		return nil, fmt.Errorf("context %q names cluster %q, which the kubeconfig does not define with a server", name, ctx.Cluster)
	}
	user, ok := cfg.AuthInfos[ctx.AuthInfo]
	if !ok {
		return nil, fmt.Errorf("context %q names user %q, which the kubeconfig does not define", name, ctx.AuthInfo)
	}
	if err := checkCluster(ctx.Cluster, cluster); err != nil {
		return nil, err
	}
	if err := checkUser(ctx.AuthInfo, user); err != nil {
		return nil, err
	}
	out := &clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{ClusterName: {
			Server:                   cluster.Server,
			TLSServerName:            cluster.TLSServerName,
			CertificateAuthorityData: cluster.CertificateAuthorityData,
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{UserName: {
			ClientCertificateData: user.ClientCertificateData,
			ClientKeyData:         user.ClientKeyData,
			Token:                 user.Token,
		}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: ClusterName, AuthInfo: UserName}},
		CurrentContext: name,
	}
	file, err := clientcmd.Write(*out)
	if err != nil {
		return nil, fmt.Errorf("writing the minimal kubeconfig: %w", err)
	}
	m := &Minimal{Data: file, Config: out, Context: name, Server: cluster.Server, Secrets: [][]byte{file, data}}
	for _, v := range [][]byte{user.ClientKeyData, []byte(user.Token)} {
		if len(v) > 0 {
			m.Secrets = append(m.Secrets, v, []byte(base64.StdEncoding.EncodeToString(v)))
		}
	}
	return m, nil
}

// checkCluster refuses what a cluster entry may not say.
func checkCluster(name string, c *clientcmdapi.Cluster) error {
	u, err := url.Parse(c.Server)
	switch {
	case err != nil || u.Host == "":
		return fmt.Errorf("cluster %q has a server that is not a URL with a host", name)
	case u.Scheme != "https":
		return fmt.Errorf("cluster %q talks %s; kao talks to API servers over https only", name, u.Scheme)
	case u.User != nil:
		return fmt.Errorf("cluster %q has credentials in its server URL; put them in the user entry", name)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("cluster %q has a server URL with a query or fragment", name)
	case c.CertificateAuthority != "":
		return fmt.Errorf("cluster %q reads its CA from a file (certificate-authority); embed it as certificate-authority-data", name)
	case c.InsecureSkipTLSVerify:
		return fmt.Errorf("cluster %q skips TLS verification; give its certificate-authority-data", name)
	case c.ProxyURL != "":
		return fmt.Errorf("cluster %q goes through a proxy (proxy-url); kao connects to API servers directly", name)
	}
	return nil
}

// checkUser refuses what a user entry may not say, and a user without a
// credential kao can pass on.
func checkUser(name string, u *clientcmdapi.AuthInfo) error {
	switch {
	case u.Exec != nil || u.AuthProvider != nil:
		return fmt.Errorf("user %q runs a credential plugin (exec or auth-provider); kao takes only credentials written in the kubeconfig", name)
	case u.ClientCertificate != "" || u.ClientKey != "" || u.TokenFile != "":
		return fmt.Errorf("user %q reads a certificate, key or token from a file; embed them (client-certificate-data, client-key-data, token)", name)
	case u.Impersonate != "" || len(u.ImpersonateGroups) > 0 || u.ImpersonateUID != "" || len(u.ImpersonateUserExtra) > 0:
		return fmt.Errorf("user %q impersonates another user; give the credentials of the user kao should act as", name)
	case u.Username != "" || u.Password != "":
		return fmt.Errorf("user %q authenticates with a user name and password; give a token or a client certificate", name)
	case len(u.ClientCertificateData) > 0 != (len(u.ClientKeyData) > 0):
		return fmt.Errorf("user %q has a client certificate without its key, or a key without its certificate", name)
	case len(u.ClientCertificateData) == 0 && u.Token == "":
		return fmt.Errorf("user %q has no credential: give a token or client-certificate-data with client-key-data", name)
	}
	return nil
}
