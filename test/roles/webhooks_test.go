package roles

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kao-io/kao/internal/pki"
)

// Manifests the webhook steps of controllersSteps submit, in the
// namespace webhookTestNamespace.
const (
	webhookTestNamespace = "kao-webhooks"

	// invalidPolicy selects resources of another namespace than its own:
	// the CRD's schema accepts it, karmada-webhook's validation refuses it.
	invalidPolicy = `apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: kao-invalid
  namespace: kao-webhooks
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: nginx
      namespace: elsewhere
`
	// validPolicy leaves the selector's namespace empty: karmada-webhook's
	// mutation fills it with the policy's.
	validPolicy = `apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: kao-valid
  namespace: kao-webhooks
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: nginx
  placement:
    clusterAffinity:
      clusterNames: [member1]
`
	// storedBinding is written in the storage version (v1alpha2) and read
	// back in v1alpha1, which only the conversion webhook can produce.
	storedBinding = `apiVersion: work.karmada.io/v1alpha2
kind: ResourceBinding
metadata:
  name: kao-conversion-probe
  namespace: kao-webhooks
spec:
  resource:
    apiVersion: apps/v1
    kind: Deployment
    name: nginx
    namespace: kao-webhooks
`
)

// clusterInfoPath is the cluster-info ConfigMap, the one path karmada-apiserver
// serves to anonymous clients.
const clusterInfoPath = "/api/v1/namespaces/kube-public/configmaps/cluster-info"

// uuidPattern matches the permanent IDs karmada-webhook puts in labels.
var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// anonymousClient trusts kao's CA and presents no credential, like
// `curl --cacert ca.crt`.
func anonymousClient(t *testing.T, b pki.Bundle) *http.Client {
	t.Helper()
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: caPool(t, b), MinVersion: tls.VersionTLS12},
	}}
}

// anonymousGet fetches url with c and returns the status code and body.
func anonymousGet(ctx context.Context, t *testing.T, c *http.Client, url string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// clusterInfo is the part of kube-public/cluster-info a pull-mode member
// reads: the kubeconfig and the bootstrap signer's signatures.
type clusterInfo struct {
	Data map[string]string `json:"data"`
}

// clusterInfoKubeconfig is the kubeconfig cluster-info publishes.
type clusterInfoKubeconfig struct {
	Clusters []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server string `json:"server"`
			CAData string `json:"certificate-authority-data"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []any `json:"users"`
}

// parseClusterInfo decodes the ConfigMap body and its kubeconfig.
func parseClusterInfo(t *testing.T, body []byte) (clusterInfo, clusterInfoKubeconfig) {
	t.Helper()
	var ci clusterInfo
	if err := json.Unmarshal(body, &ci); err != nil {
		t.Fatalf("cluster-info is not a ConfigMap: %v\n%s", err, body)
	}
	var kc clusterInfoKubeconfig
	if err := yaml.Unmarshal([]byte(ci.Data["kubeconfig"]), &kc); err != nil {
		t.Fatalf("cluster-info's kubeconfig does not parse: %v\n%s", err, ci.Data["kubeconfig"])
	}
	return ci, kc
}

// registerCommand is what `karmadactl token create --print-register-command`
// prints: the endpoint, the token and the CA's public-key pin.
var registerCommand = regexp.MustCompile(`register (\S+) --token ([a-z0-9]{6})\.([a-z0-9]{16}) --discovery-token-ca-cert-hash (sha256:[0-9a-f]{64})`)

// caPin is the discovery hash of a PEM certificate: sha256 of its public key
// info, as kubeadm and karmadactl compute it.
func caPin(t *testing.T, certPEM []byte) string {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("ca.crt is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// checkDetachedJWS verifies a bootstrap signer's signature ("header..sig",
// HS256 keyed with the token secret) of content, as `karmadactl register`
// does before it trusts what it read anonymously.
func checkDetachedJWS(detached, content, tokenID, tokenSecret string) error {
	parts := strings.Split(detached, ".")
	if len(parts) != 3 || parts[1] != "" {
		return fmt.Errorf("not a detached JWS: %d parts", len(parts))
	}
	rawHeader, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return fmt.Errorf("header: %w", err)
	}
	var header struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if err := json.Unmarshal(rawHeader, &header); err != nil {
		return fmt.Errorf("header: %w", err)
	}
	if header.Alg != "HS256" || header.Kid != tokenID {
		return fmt.Errorf("header names alg %q kid %q, want HS256 and the token's ID", header.Alg, header.Kid)
	}
	mac := hmac.New(sha256.New, []byte(tokenSecret))
	mac.Write([]byte(parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(content))))
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return fmt.Errorf("signature: %w", err)
	}
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return fmt.Errorf("the signature does not match the kubeconfig")
	}
	return nil
}

// tokenKubeconfig is a kubeconfig that authenticates with a bootstrap token.
func tokenKubeconfig(server string, ca []byte, token string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
  - name: karmada
    cluster:
      server: %s
      certificate-authority-data: %s
users:
  - name: bootstrap
    user:
      token: %s
contexts:
  - name: bootstrap
    context: {cluster: karmada, user: bootstrap}
current-context: bootstrap
`, server, base64.StdEncoding.EncodeToString(ca), token))
}
