package v1alpha1_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kao-io/kao/internal/testenv"
)

var (
	env *testenv.Env
	cl  client.Client
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping API validation tests in -short mode: they need a real kube-apiserver")
		return 0
	}
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	cl, err = client.New(env.Config, client.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// sample loads a file of config/samples as an unstructured object.
func sample(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &obj.Object); err != nil {
		t.Fatalf("parsing %s: %v", file, err)
	}
	return obj
}

const (
	binarySample        = "kao_v1alpha1_karmadadeployment_binary.yaml"
	containerizedSample = "kao_v1alpha1_karmadadeployment_containerized.yaml"
	backupSample        = "kao_v1alpha1_etcdbackup.yaml"
	restoreSample       = "kao_v1alpha1_etcdrestore.yaml"
)

func createInNamespace(ctx context.Context, t *testing.T, obj *unstructured.Unstructured) error {
	t.Helper()
	obj.SetNamespace("default")
	obj.SetName(fmt.Sprintf("%s-%d", obj.GetName(), nextID()))
	return cl.Create(ctx, obj)
}

var idCounter int

func nextID() int {
	idCounter++
	return idCounter
}

func TestSamplesAreAccepted(t *testing.T) {
	for _, file := range []string{binarySample, containerizedSample, backupSample, restoreSample} {
		t.Run(file, func(t *testing.T) {
			if err := createInNamespace(context.Background(), t, sample(t, file)); err != nil {
				t.Fatalf("the API server rejected sample %s: %v", file, err)
			}
		})
	}
}

// TestSamplesPassKubectlDryRun applies every sample with the real kubectl, as a
// user following the README would.
func TestSamplesPassKubectlDryRun(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(env.AssetsDir, "kubectl"), "--kubeconfig", kubeconfig,
		"apply", "--dry-run=server", "-n", "default", "-k", filepath.Join(testenv.RepoRoot(), "config", "samples"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server failed: %v\n%s", err, out)
	}
	for _, want := range []string{"karmadadeployment.kao.io/dc1", "karmadadeployment.kao.io/platform",
		"etcdbackup.kao.io/dc1-every-6h", "etcdrestore.kao.io/dc1-restore"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl output lacks %q:\n%s", want, out)
		}
	}
}

// set assigns a value at a path of nested maps, creating the maps on the way.
func set(obj map[string]any, value any, path ...string) {
	for _, p := range path[:len(path)-1] {
		next, ok := obj[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			obj[p] = next
		}
		obj = next
	}
	obj[path[len(path)-1]] = value
}

// hosts returns the spec.hosts list of a KarmadaDeployment.
func hosts(obj map[string]any) []any {
	return obj["spec"].(map[string]any)["hosts"].([]any)
}

func host(obj map[string]any, i int) map[string]any {
	return hosts(obj)[i].(map[string]any)
}

func member(obj map[string]any, i int) map[string]any {
	return obj["spec"].(map[string]any)["members"].([]any)[i].(map[string]any)
}

func spec(obj map[string]any) map[string]any { return obj["spec"].(map[string]any) }

// TestContainerizedExposureVariantsAreAccepted checks the ways kao can reach
// a Containerized karmada-apiserver that the API must let through.
func TestContainerizedExposureVariantsAreAccepted(t *testing.T) {
	tests := []struct {
		// name says how karmada-apiserver is reached.
		name string
		// mutate changes the Containerized sample.
		mutate func(obj map[string]any)
	}{
		{name: "remote host cluster through a load balancer", mutate: func(o map[string]any) {
			set(o, "LoadBalancer", "spec", "apiServer", "serviceType")
		}},
		{name: "remote host cluster, ClusterIP behind the user's own endpoint", mutate: func(o map[string]any) {
			set(o, "ClusterIP", "spec", "apiServer", "serviceType")
			set(o, "karmada.dc1.example:443", "spec", "apiServer", "endpoint")
		}},
		{name: "operator in the host cluster with the default ClusterIP", mutate: func(o map[string]any) {
			delete(spec(o)["apiServer"].(map[string]any), "serviceType")
			set(o, map[string]any{"inCluster": true}, "spec", "hostCluster")
		}},
		{name: "every addon, with members named up to the estimators' limit", mutate: func(o map[string]any) {
			on := map[string]any{"enabled": true}
			set(o, map[string]any{"search": on, "metricsAdapter": on, "descheduler": on, "schedulerEstimator": on}, "spec", "addons")
			set(o, []any{map[string]any{"name": strings.Repeat("m", 35), "syncMode": "Push",
				"kubeconfigSecretRef": map[string]any{"name": "m", "key": "kubeconfig"}}}, "spec", "members")
		}},
		{name: "etcd resources and tolerations", mutate: func(o map[string]any) {
			set(o, map[string]any{"requests": map[string]any{"cpu": "1", "memory": "2Gi"}}, "spec", "etcd", "managed", "resources")
			set(o, []any{map[string]any{"key": "dedicated", "operator": "Exists"}}, "spec", "etcd", "managed", "tolerations")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := sample(t, containerizedSample)
			tt.mutate(obj.Object)
			if err := createInNamespace(context.Background(), t, obj); err != nil {
				t.Fatalf("the API server rejected a valid object: %v", err)
			}
		})
	}
}

func TestInvalidObjectsAreRejected(t *testing.T) {
	tests := []struct {
		// name says what is wrong with the object.
		name string
		// sample is the valid sample the object starts from.
		sample string
		// mutate breaks the sample.
		mutate func(obj map[string]any)
		// wantMessage is what the API server must tell the user.
		wantMessage string
	}{
		{
			name:        "binary mode without hosts",
			sample:      binarySample,
			mutate:      func(o map[string]any) { delete(spec(o), "hosts") },
			wantMessage: "spec.hosts is required when spec.mode is Binary",
		},
		{
			name:        "binary mode without ssh",
			sample:      binarySample,
			mutate:      func(o map[string]any) { delete(spec(o), "ssh") },
			wantMessage: "spec.ssh is required when spec.mode is Binary",
		},
		{
			name:        "containerized mode without a host cluster",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { delete(spec(o), "hostCluster") },
			wantMessage: "spec.hostCluster is required when spec.mode is Containerized",
		},
		{
			name:   "containerized mode with hosts",
			sample: containerizedSample,
			mutate: func(o map[string]any) {
				set(o, []any{map[string]any{"name": "h1", "address": "10.0.0.1", "roles": []any{"etcd"}}}, "spec", "hosts")
			},
			wantMessage: "spec.hosts is only used when spec.mode is Binary",
		},
		{
			name:   "host cluster with both a kubeconfig and in-cluster",
			sample: containerizedSample,
			mutate: func(o map[string]any) { set(o, true, "spec", "hostCluster", "inCluster") },
			wantMessage: "set exactly one of spec.hostCluster.kubeconfigSecretRef and " +
				"spec.hostCluster.inCluster: true",
		},
		{
			name:   "etcd both managed and external",
			sample: binarySample,
			mutate: func(o map[string]any) {
				set(o, map[string]any{
					"endpoints":            []any{"https://10.0.0.5:2379"},
					"caSecretRef":          map[string]any{"name": "etcd-ca", "key": "ca.crt"},
					"clientCertSecretName": "etcd-client",
				}, "spec", "etcd", "external")
			},
			wantMessage: "set exactly one of spec.etcd.managed and spec.etcd.external",
		},
		{
			name:        "etcd neither managed nor external",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, map[string]any{}, "spec", "etcd") },
			wantMessage: "set exactly one of spec.etcd.managed and spec.etcd.external",
		},
		{
			name:        "even number of etcd hosts",
			sample:      binarySample,
			mutate:      func(o map[string]any) { host(o, 2)["roles"] = []any{"controlPlane"} },
			wantMessage: "managed etcd needs an odd number of hosts with the etcd role",
		},
		{
			name:        "even number of containerized etcd replicas",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, int64(2), "spec", "etcd", "managed", "replicas") },
			wantMessage: "spec.etcd.managed.replicas must be odd",
		},
		{
			name:        "replicas for binary managed etcd",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, int64(3), "spec", "etcd", "managed", "replicas") },
			wantMessage: "spec.etcd.managed.replicas is only used in Containerized mode",
		},
		{
			name:   "external etcd with etcd host roles",
			sample: binarySample,
			mutate: func(o map[string]any) {
				set(o, map[string]any{"external": map[string]any{
					"endpoints":            []any{"https://10.0.0.5:2379"},
					"caSecretRef":          map[string]any{"name": "etcd-ca", "key": "ca.crt"},
					"clientCertSecretName": "etcd-client",
				}}, "spec", "etcd")
			},
			wantMessage: "the etcd host role is only used with spec.etcd.managed",
		},
		{
			name:        "duplicate host names",
			sample:      binarySample,
			mutate:      func(o map[string]any) { host(o, 1)["name"] = "cp-1" },
			wantMessage: `spec.hosts[1]: Duplicate value: {"name":"cp-1"}`,
		},
		{
			name:        "duplicate member names",
			sample:      binarySample,
			mutate:      func(o map[string]any) { member(o, 1)["name"] = "edge-1" },
			wantMessage: `spec.members[1]: Duplicate value: {"name":"edge-1"}`,
		},
		{
			name:        "host name that is not a DNS-1123 label",
			sample:      binarySample,
			mutate:      func(o map[string]any) { host(o, 0)["name"] = "CP_1" },
			wantMessage: `spec.hosts[0].name: Invalid value: "CP_1": spec.hosts[0].name in body should match`,
		},
		{
			name:        "member name longer than 48 characters",
			sample:      binarySample,
			mutate:      func(o map[string]any) { member(o, 0)["name"] = strings.Repeat("m", 49) },
			wantMessage: "spec.members[0].name: Too long: may not be more than 48 bytes",
		},
		{
			name:        "member name that is not a DNS-1123 label",
			sample:      binarySample,
			mutate:      func(o map[string]any) { member(o, 0)["name"] = "edge.1" },
			wantMessage: `spec.members[0].name: Invalid value: "edge.1"`,
		},
		{
			name:   "no host with the apiServer role",
			sample: binarySample,
			mutate: func(o map[string]any) {
				host(o, 0)["roles"] = []any{"etcd"}
				host(o, 1)["roles"] = []any{"etcd", "controlPlane"}
			},
			wantMessage: "at least one host in spec.hosts needs the apiServer role",
		},
		{
			name:   "no host with the controlPlane role",
			sample: binarySample,
			mutate: func(o map[string]any) {
				host(o, 1)["roles"] = []any{"etcd", "apiServer"}
				host(o, 2)["roles"] = []any{"etcd"}
			},
			wantMessage: "at least one host in spec.hosts needs the controlPlane role",
		},
		{
			name:        "unknown host role",
			sample:      binarySample,
			mutate:      func(o map[string]any) { host(o, 2)["roles"] = []any{"etcd", "worker"} },
			wantMessage: `spec.hosts[2].roles[1]: Unsupported value: "worker"`,
		},
		{
			name:        "endpoint without a port",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, "192.0.2.10", "spec", "apiServer", "endpoint") },
			wantMessage: "spec.apiServer.endpoint must be host:port",
		},
		{
			name:        "endpoint with a port out of range",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, "192.0.2.10:70000", "spec", "apiServer", "endpoint") },
			wantMessage: "spec.apiServer.endpoint port must be between 1 and 65535",
		},
		{
			name:        "two API servers without an endpoint",
			sample:      binarySample,
			mutate:      func(o map[string]any) { delete(spec(o)["apiServer"].(map[string]any), "endpoint") },
			wantMessage: "spec.apiServer.endpoint (a VIP or load balancer host:port) is required when more than one host has the apiServer role",
		},
		{
			name:        "host address with shell metacharacters",
			sample:      binarySample,
			mutate:      func(o map[string]any) { host(o, 0)["address"] = "10.0.0.1;reboot" },
			wantMessage: "address must be an IP address or a lower-case DNS name",
		},
		{
			name:        "two hosts with the same address and port",
			sample:      binarySample,
			mutate:      func(o map[string]any) { host(o, 1)["address"] = "192.0.2.11" },
			wantMessage: "spec.hosts must not list the same address and port twice",
		},
		{
			name:        "unknown mode",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, "Docker", "spec", "mode") },
			wantMessage: `spec.mode: Unsupported value: "Docker": supported values: "Binary", "Containerized"`,
		},
		{
			name:        "version without the v prefix",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, "1.18.1", "spec", "version") },
			wantMessage: `spec.version: Invalid value: "1.18.1": spec.version in body should match`,
		},
		{
			name:   "extra arg written with leading dashes",
			sample: binarySample,
			mutate: func(o map[string]any) {
				set(o, []any{map[string]any{"name": "--v", "value": "4"}}, "spec", "apiServer", "extraArgs")
			},
			wantMessage: `spec.apiServer.extraArgs[0].name: Invalid value: "--v"`,
		},
		{
			name:   "artifacts from both a path and a URL",
			sample: binarySample,
			mutate: func(o map[string]any) {
				set(o, map[string]any{"localPath": "/srv/kao", "url": "http://10.0.0.2/kao"}, "spec", "artifacts")
			},
			wantMessage: "set at most one of spec.artifacts.localPath and spec.artifacts.url",
		},
		{
			name:   "SSH key reference without a key",
			sample: binarySample,
			mutate: func(o map[string]any) {
				delete(spec(o)["ssh"].(map[string]any)["privateKeySecretRef"].(map[string]any), "key")
			},
			wantMessage: "spec.ssh.privateKeySecretRef.key: Required value",
		},
		{
			name:        "host named localhost",
			sample:      binarySample,
			mutate:      func(o map[string]any) { host(o, 0)["name"] = "localhost" },
			wantMessage: "a host name must not be localhost or the name of an inventory group",
		},
		{
			name:        "etcd data directory that is a system directory",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, "/var/lib", "spec", "etcd", "managed", "dataDir") },
			wantMessage: "spec.etcd.managed.dataDir must not be a system directory",
		},
		{
			name:        "etcd data directory with a .. segment",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, "/var/lib/karmada-etcd/../..", "spec", "etcd", "managed", "dataDir") },
			wantMessage: "spec.etcd.managed.dataDir must be a plain absolute path",
		},
		{
			name:   "extra arg value with a newline",
			sample: binarySample,
			mutate: func(o map[string]any) {
				set(o, []any{map[string]any{"name": "v", "value": "4\nExecStartPre=/bin/true"}}, "spec", "apiServer", "extraArgs")
			},
			wantMessage: "an extra arg value must not contain control characters",
		},
		{
			name:        "drift checks more often than every minute",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, map[string]any{"interval": "30s"}, "spec", "driftCheck") },
			wantMessage: "spec.driftCheck.interval must be a duration of at least 1m",
		},
		{
			name:        "drift checks without an interval",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, map[string]any{"autoRepair": true}, "spec", "driftCheck") },
			wantMessage: "spec.driftCheck.interval: Required value",
		},
		{
			name:        "drift checks of a Containerized control plane",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, map[string]any{"interval": "30m"}, "spec", "driftCheck") },
			wantMessage: "spec.driftCheck covers Binary mode",
		},
		{
			name:        "certificate validity Go cannot parse",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, "1y", "spec", "certificates", "validity") },
			wantMessage: "spec.certificates.validity must be a duration of at least 1m",
		},
		{
			name:        "certificate renewal window longer than the validity",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, "9000h", "spec", "certificates", "renewBefore") },
			wantMessage: "spec.certificates.renewBefore (default 720h) must be shorter than spec.certificates.validity",
		},
		{
			name:   "affinity weight beyond int32",
			sample: containerizedSample,
			mutate: func(o map[string]any) {
				set(o, []any{map[string]any{"weight": int64(3000000000), "preference": map[string]any{}}},
					"spec", "hostCluster", "affinity", "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
			},
			wantMessage: "every weight in spec.hostCluster.affinity must be between 1 and 100",
		},
		{
			name:        "containerized mode without an image registry",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { delete(spec(o)["artifacts"].(map[string]any), "imageRegistry") },
			wantMessage: "spec.artifacts.imageRegistry is required when spec.mode is Containerized",
		},
		{
			name:        "remote host cluster behind a ClusterIP Service",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, "ClusterIP", "spec", "apiServer", "serviceType") },
			wantMessage: "with spec.hostCluster.kubeconfigSecretRef set spec.apiServer.serviceType to NodePort or LoadBalancer",
		},
		{
			name:        "remote host cluster with the default service type",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { delete(spec(o)["apiServer"].(map[string]any), "serviceType") },
			wantMessage: "kao reaches a remote host cluster's karmada-apiserver from outside that cluster",
		},
		{
			name:   "member name too long for its estimator's Service",
			sample: binarySample,
			mutate: func(o map[string]any) {
				member(o, 0)["name"] = strings.Repeat("m", 36)
				set(o, map[string]any{"enabled": true}, "spec", "addons", "schedulerEstimator")
			},
			wantMessage: "with spec.addons.schedulerEstimator enabled, member names must be at most 35 characters",
		},
		{
			name:   "containerized mode with ssh",
			sample: containerizedSample,
			mutate: func(o map[string]any) {
				set(o, map[string]any{
					"privateKeySecretRef": map[string]any{"name": "ssh", "key": "id_ed25519"},
					"knownHostsSecretRef": map[string]any{"name": "ssh", "key": "known_hosts"},
				}, "spec", "ssh")
			},
			wantMessage: "spec.ssh is only used when spec.mode is Binary",
		},
		{
			name:   "binary mode with a host cluster",
			sample: binarySample,
			mutate: func(o map[string]any) {
				set(o, map[string]any{"inCluster": true}, "spec", "hostCluster")
			},
			wantMessage: "spec.hostCluster is only used when spec.mode is Containerized",
		},
		{
			name:        "host cluster namespace that is not a DNS-1123 label",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, "Karmada_System", "spec", "hostCluster", "namespace") },
			wantMessage: `spec.hostCluster.namespace: Invalid value: "Karmada_System"`,
		},
		{
			name:        "unknown apiserver service type",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, "ExternalName", "spec", "apiServer", "serviceType") },
			wantMessage: `spec.apiServer.serviceType: Unsupported value: "ExternalName"`,
		},
		{
			name:        "more than seven containerized etcd replicas",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, int64(9), "spec", "etcd", "managed", "replicas") },
			wantMessage: "spec.etcd.managed.replicas: Invalid value: 9: spec.etcd.managed.replicas in body should be less than or equal to 7",
		},
		{
			name:        "component with zero replicas",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, int64(0), "spec", "components", "scheduler", "replicas") },
			wantMessage: "spec.components.scheduler.replicas in body should be greater than or equal to 1",
		},
		{
			name:        "unknown etcd storage type",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, "NFS", "spec", "etcd", "managed", "storage", "type") },
			wantMessage: `spec.etcd.managed.storage.type: Unsupported value: "NFS"`,
		},
		{
			name:   "volume size for HostPath etcd storage",
			sample: containerizedSample,
			mutate: func(o map[string]any) {
				set(o, map[string]any{"type": "HostPath", "size": "10Gi"}, "spec", "etcd", "managed", "storage")
			},
			wantMessage: "spec.etcd.managed.storage.size is only used with type PersistentVolumeClaim",
		},
		{
			name:   "storage class for EmptyDir etcd storage",
			sample: containerizedSample,
			mutate: func(o map[string]any) {
				set(o, map[string]any{"type": "EmptyDir", "storageClassName": "fast"}, "spec", "etcd", "managed", "storage")
			},
			wantMessage: "spec.etcd.managed.storage.storageClassName is only used with type PersistentVolumeClaim",
		},
		{
			name:        "image pull secret name that is not a DNS name",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, "Registry Creds", "spec", "artifacts", "imagePullSecretName") },
			wantMessage: `spec.artifacts.imagePullSecretName: Invalid value: "Registry Creds"`,
		},
		{
			name:   "etcd resources in binary mode",
			sample: binarySample,
			mutate: func(o map[string]any) {
				set(o, map[string]any{"requests": map[string]any{"cpu": "1"}}, "spec", "etcd", "managed", "resources")
			},
			wantMessage: "spec.etcd.managed.resources and spec.etcd.managed.tolerations are only used in Containerized mode",
		},
		{
			name:        "backup retention without a schedule",
			sample:      backupSample,
			mutate:      func(o map[string]any) { delete(spec(o), "schedule") },
			wantMessage: "spec.retention needs spec.schedule",
		},
		{
			name:        "backup with a malformed schedule",
			sample:      backupSample,
			mutate:      func(o map[string]any) { set(o, "every six hours", "spec", "schedule") },
			wantMessage: "spec.schedule must be a five-field cron expression",
		},
		{
			name:        "SSH backup destination without its host",
			sample:      backupSample,
			mutate:      func(o map[string]any) { set(o, "SSH", "spec", "destination", "type") },
			wantMessage: "spec.destination.ssh is required when spec.destination.type is SSH",
		},
		{
			name:        "restore from a path without a checksum",
			sample:      restoreSample,
			mutate:      func(o map[string]any) { set(o, map[string]any{"path": "/var/lib/kao/backups/x.db"}, "spec", "source") },
			wantMessage: "spec.source.sha256 is required with spec.source.path",
		},
		{
			name:   "restore from both a backup and a path",
			sample: restoreSample,
			mutate: func(o map[string]any) {
				set(o, "/var/lib/kao/backups/x.db", "spec", "source", "path")
				set(o, strings.Repeat("a", 64), "spec", "source", "sha256")
			},
			wantMessage: "set exactly one of spec.source.backupName and spec.source.path",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := sample(t, tt.sample)
			tt.mutate(obj.Object)
			err := createInNamespace(context.Background(), t, obj)
			if err == nil {
				t.Fatalf("the API server accepted an invalid object; want an error containing %q", tt.wantMessage)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			if !strings.Contains(err.Error(), tt.wantMessage) {
				t.Fatalf("error does not tell the user what is wrong:\n got: %v\nwant: ...%s...", err, tt.wantMessage)
			}
		})
	}
}

func TestImmutableFieldsRejectUpdates(t *testing.T) {
	tests := []struct {
		// name says which field changes.
		name string
		// sample is the object created first.
		sample string
		// before, if set, changes the sample before it is created.
		before func(obj map[string]any)
		// mutate changes the created object.
		mutate func(obj map[string]any)
		// wantMessage is what the API server must tell the user.
		wantMessage string
	}{
		{
			name:        "deployment mode",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, "Binary", "spec", "mode") },
			wantMessage: "spec.mode is immutable",
		},
		{
			name:   "etcd from managed to external",
			sample: binarySample,
			mutate: func(o map[string]any) {
				for i := range hosts(o) {
					host(o, i)["roles"] = []any{"apiServer", "controlPlane"}
				}
				set(o, map[string]any{"external": map[string]any{
					"endpoints":            []any{"https://10.0.0.5:2379"},
					"caSecretRef":          map[string]any{"name": "etcd-ca", "key": "ca.crt"},
					"clientCertSecretName": "etcd-client",
				}}, "spec", "etcd")
			},
			wantMessage: "spec.etcd cannot switch between managed and external",
		},
		{
			name:        "etcd data directory",
			sample:      binarySample,
			mutate:      func(o map[string]any) { set(o, "/data/karmada-etcd", "spec", "etcd", "managed", "dataDir") },
			wantMessage: "spec.etcd.managed.dataDir cannot change",
		},
		{
			name:        "host cluster namespace",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, "karmada-two", "spec", "hostCluster", "namespace") },
			wantMessage: "spec.hostCluster.namespace cannot change",
		},
		{
			name:   "host cluster namespace set where it was defaulted",
			sample: containerizedSample,
			before: func(o map[string]any) {
				delete(spec(o)["hostCluster"].(map[string]any), "namespace")
			},
			mutate:      func(o map[string]any) { set(o, "karmada-two", "spec", "hostCluster", "namespace") },
			wantMessage: "spec.hostCluster.namespace cannot change",
		},
		{
			name:        "containerized etcd replicas",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, int64(5), "spec", "etcd", "managed", "replicas") },
			wantMessage: "spec.etcd.managed.replicas cannot change",
		},
		{
			name:        "containerized etcd storage",
			sample:      containerizedSample,
			mutate:      func(o map[string]any) { set(o, "20Gi", "spec", "etcd", "managed", "storage", "size") },
			wantMessage: "spec.etcd.managed.storage cannot change",
		},
		{
			name:        "restore source",
			sample:      restoreSample,
			mutate:      func(o map[string]any) { set(o, "other-backup", "spec", "source", "backupName") },
			wantMessage: "spec is immutable: create a new EtcdRestore instead",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			obj := sample(t, tt.sample)
			if tt.before != nil {
				tt.before(obj.Object)
			}
			if err := createInNamespace(ctx, t, obj); err != nil {
				t.Fatal(err)
			}
			tt.mutate(obj.Object)
			err := cl.Update(ctx, obj)
			if err == nil || !strings.Contains(err.Error(), tt.wantMessage) {
				t.Fatalf("want an update error containing %q, got %v", tt.wantMessage, err)
			}
		})
	}
}

// TestALostHostLeavesInOneStep replaces a dead etcd host as an SRE would,
// in one edit: the host leaves spec.hosts, its replacement joins, and
// spec.lostHosts names it. Without lostHosts the same edit is refused, and
// a host cannot be lost and listed at once.
func TestALostHostLeavesInOneStep(t *testing.T) {
	ctx := context.Background()
	obj := sample(t, binarySample)
	if err := createInNamespace(ctx, t, obj); err != nil {
		t.Fatal(err)
	}
	replace := func(o map[string]any) {
		h := host(o, 2)
		spec(o)["hosts"] = append(hosts(o)[:2], map[string]any{"name": "cp-4", "address": "192.0.2.14", "roles": h["roles"]})
	}

	without := obj.DeepCopy()
	replace(without.Object)
	if err := cl.Update(ctx, without); err == nil || !strings.Contains(err.Error(), "cannot leave spec.hosts in one step") {
		t.Errorf("an etcd host left spec.hosts in one step without spec.lostHosts: %v", err)
	}

	both := obj.DeepCopy()
	set(both.Object, []any{"cp-2"}, "spec", "lostHosts")
	if err := cl.Update(ctx, both); err == nil || !strings.Contains(err.Error(), "cannot also be in spec.hosts") {
		t.Errorf("a host in spec.hosts was accepted in spec.lostHosts: %v", err)
	}

	with := obj.DeepCopy()
	replace(with.Object)
	set(with.Object, []any{"cp-3"}, "spec", "lostHosts")
	if err := cl.Update(ctx, with); err != nil {
		t.Errorf("the dead host's replacement with spec.lostHosts was refused: %v", err)
	}
}
