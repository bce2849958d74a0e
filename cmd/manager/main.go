// Command manager runs the kao operator: the KarmadaDeployment, EtcdBackup and
// EtcdRestore controllers.
package main

import (
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller"
	"github.com/kao-io/kao/internal/controller/etcdbackup"
	"github.com/kao-io/kao/internal/etcdsnapshot"
	"github.com/kao-io/kao/internal/jobexec"
)

// options are the manager's command-line settings.
type options struct {
	metricsAddr             string
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	maxConcurrentReconciles int
	maxConcurrentProbes     int
	kubeAPIQPS              float64
	kubeAPIBurst            int
	stateDir                string
	playbookDir             string
	rolesPath               string
	artifactsDir            string
	maxForks                int
	runTimeout              time.Duration
	logRetention            int
	watchNamespaces         string
	userRolesDir            string
	configMapUserRoles      bool
	maxSnapshotSize         string
	// The tenancy policy (controller.Policy).
	allowedArtifactPaths      string
	allowedArtifactURLs       string
	allowedInClusterNS        string
	allowInClusterHostPath    bool
	allowInClusterTolerations bool
	// Where runs take place (--executor and the Job settings).
	executor         string
	jobImage         string
	jobPullPolicy    string
	jobPullSecrets   string
	jobCPURequest    string
	jobMemoryRequest string
	jobMemoryLimit   string
	maxRuns          int
	maxRunsPerNS     int
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		os.Exit(runCommand(os.Args[2:], os.Stdout))
	}
	if len(os.Args) > 1 && os.Args[1] == etcdbackup.SnapshotCommand {
		os.Exit(snapshotCommand(os.Args[2:], os.Stdout))
	}
	opts := options{}
	flag.StringVar(&opts.metricsAddr, "metrics-bind-address", ":8080", "Address the metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&opts.probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.BoolVar(&opts.leaderElect, "leader-elect", false, "Elect a leader so only one manager replica reconciles at a time.")
	flag.StringVar(&opts.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election lease; the manager's own namespace when empty.")
	flag.IntVar(&opts.maxConcurrentReconciles, "max-concurrent-reconciles", 4, "Objects of one kind reconciled at once; each may run one ansible-playbook.")
	flag.IntVar(&opts.maxConcurrentProbes, "max-concurrent-probes", controller.DefaultMaxConcurrentProbes, "Installed control planes probed at once, on workers apart from the reconciles that start runs.")
	flag.StringVar(&opts.stateDir, "state-dir", "/var/lib/kao", "Directory for run directories, fact caches and logs.")
	flag.StringVar(&opts.playbookDir, "playbook-dir", "/opt/kao/playbooks", "Directory holding kao's entry playbooks.")
	flag.StringVar(&opts.rolesPath, "roles-path", "/opt/kao/roles", "Colon-separated directories holding roles.")
	flag.StringVar(&opts.artifactsDir, "artifacts-dir", "/opt/kao/artifacts", "Default offline bundle (make artifacts) for Binary deployments without spec.artifacts.")
	flag.IntVar(&opts.maxForks, "max-forks", 25, "Most hosts one ansible-playbook works on at once.")
	flag.Float64Var(&opts.kubeAPIQPS, "kube-api-qps", 20, "Requests per second the manager sends to its own API server, on average (client-go's rate limit).")
	flag.IntVar(&opts.kubeAPIBurst, "kube-api-burst", 30, "Requests the manager may send to its own API server in a burst above --kube-api-qps.")
	flag.DurationVar(&opts.runTimeout, "run-timeout", 60*time.Minute, "Longest a playbook run may take before it is stopped.")
	flag.IntVar(&opts.logRetention, "log-retention", 5, "Run logs (ConfigMaps and run directories) kept per KarmadaDeployment.")
	flag.StringVar(&opts.watchNamespaces, "watch-namespaces", "", "Comma-separated namespaces to watch, for the namespaced RBAC of config/rbac-namespaced; every namespace when empty.")
	flag.StringVar(&opts.userRolesDir, "user-roles-dir", "", "Directory of the operator's filesystem that user roles given by path (spec.addons.userRoles[].path) must lie under; none are run when empty.")
	flag.BoolVar(&opts.configMapUserRoles, "configmap-user-roles", false, "Run user roles from ConfigMaps (spec.addons.userRoles[].configMapName). "+
		"They run with the operator's rights: allow them only where whoever may write KarmadaDeployments and ConfigMaps is trusted like the operator's administrators.")
	flag.StringVar(&opts.maxSnapshotSize, "max-snapshot-size", resource.NewQuantity(etcdsnapshot.DefaultMaxBytes, resource.BinarySI).String(),
		"Largest etcd snapshot kao takes (a quantity; the default is etcd's largest database and its hash); a snapshot also needs its size free on the state volume.")
	flag.StringVar(&opts.allowedArtifactPaths, "allowed-artifact-paths", "", "Comma-separated directories of the operator's filesystem that spec.artifacts.localPath may name or lie under, besides --artifacts-dir.")
	flag.StringVar(&opts.allowedArtifactURLs, "allowed-artifact-urls", "", "Comma-separated URL prefixes spec.artifacts.url may start with; no bundle URL is allowed when empty.")
	flag.StringVar(&opts.allowedInClusterNS, "allowed-in-cluster-namespaces", "", "Comma-separated namespaces (path.Match patterns such as karmada-*) of the operator's own cluster that spec.hostCluster.inCluster deployments may use; none when empty.")
	flag.BoolVar(&opts.allowInClusterHostPath, "allow-in-cluster-host-path", false, "Allow HostPath etcd storage on the operator's own cluster's nodes (spec.hostCluster.inCluster).")
	flag.BoolVar(&opts.allowInClusterTolerations, "allow-in-cluster-tolerations", false, "Allow tolerations on the operator's own cluster (spec.hostCluster.inCluster).")
	flag.IntVar(&opts.maxRuns, "max-concurrent-runs", 0, "Most KarmadaDeployment runs in progress at once; the others wait with condition RunQueued. 0 is no limit.")
	flag.IntVar(&opts.maxRunsPerNS, "max-concurrent-runs-per-namespace", 0, "Most KarmadaDeployment runs in progress at once in one namespace. 0 is no limit.")
	flag.StringVar(&opts.executor, "executor", "process", "Where KarmadaDeployments' playbooks run: process (children of the manager) or job (a Job per run in the deployment's namespace, which outlives the manager).")
	flag.StringVar(&opts.jobImage, "job-image", "", "Image of the run Jobs (--executor=job): the manager's own image.")
	flag.StringVar(&opts.jobPullPolicy, "job-image-pull-policy", string(corev1.PullIfNotPresent), "Pull policy of the run Jobs' image.")
	flag.StringVar(&opts.jobPullSecrets, "job-image-pull-secrets", "", "Comma-separated pull Secrets of the run Jobs' image; each must exist in every namespace runs take place in.")
	flag.StringVar(&opts.jobCPURequest, "job-cpu-request", "200m", "CPU request of a run Job's pod.")
	flag.StringVar(&opts.jobMemoryRequest, "job-memory-request", "256Mi", "Memory request of a run Job's pod.")
	flag.StringVar(&opts.jobMemoryLimit, "job-memory-limit", "1Gi", "Memory limit of a run Job's pod; 0 for none.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(opts); err != nil {
		fmt.Fprintf(os.Stderr, "kao manager: %v\n", err)
		os.Exit(1)
	}
}

func run(opts options) error {
	if opts.maxRuns < 0 || opts.maxRunsPerNS < 0 {
		return fmt.Errorf("--max-concurrent-runs and --max-concurrent-runs-per-namespace must be 0 (no limit) or more")
	}
	if opts.maxConcurrentReconciles < 1 {
		return fmt.Errorf("--max-concurrent-reconciles must be at least 1, got %d", opts.maxConcurrentReconciles)
	}
	if opts.kubeAPIQPS <= 0 || opts.kubeAPIBurst < 1 {
		return fmt.Errorf("--kube-api-qps must be above 0 and --kube-api-burst at least 1, got %g and %d", opts.kubeAPIQPS, opts.kubeAPIBurst)
	}
	if opts.maxConcurrentProbes < 1 {
		return fmt.Errorf("--max-concurrent-probes must be at least 1, got %d", opts.maxConcurrentProbes)
	}
	if !filepath.IsAbs(opts.stateDir) || !filepath.IsAbs(opts.playbookDir) {
		return fmt.Errorf("--state-dir and --playbook-dir must be absolute paths")
	}
	if opts.userRolesDir != "" && !filepath.IsAbs(opts.userRolesDir) {
		return fmt.Errorf("--user-roles-dir must be an absolute path, got %q", opts.userRolesDir)
	}
	policy, err := tenancyPolicy(opts)
	if err != nil {
		return err
	}
	maxSnapshot, err := resource.ParseQuantity(opts.maxSnapshotSize)
	if err != nil || maxSnapshot.Sign() <= 0 {
		return fmt.Errorf("--max-snapshot-size must be a positive quantity such as 8Gi, got %q", opts.maxSnapshotSize)
	}
	if err := os.MkdirAll(opts.stateDir, 0o700); err != nil {
		return fmt.Errorf("creating state directory %s: %w", opts.stateDir, err)
	}

	cacheOpts, err := cacheOptions(opts.watchNamespaces)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kaov1.AddToScheme(scheme))

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reading the manager's kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(opts.kubeAPIQPS), opts.kubeAPIBurst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: opts.metricsAddr},
		HealthProbeBindAddress:  opts.probeAddr,
		LeaderElection:          opts.leaderElect,
		LeaderElectionID:        "kao-manager.kao.io",
		LeaderElectionNamespace: opts.leaderElectionNamespace,
		Cache:                   cacheOpts,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}

	remote, err := jobExecutor(opts, mgr)
	if err != nil {
		return err
	}
	err = controller.SetupAll(mgr, controller.Options{
		Remote:                  remote,
		RunLimits:               controller.RunLimits{Total: opts.maxRuns, PerNamespace: opts.maxRunsPerNS},
		StateDir:                opts.stateDir,
		PlaybookDir:             opts.playbookDir,
		RolesPath:               filepath.SplitList(opts.rolesPath),
		ArtifactsDir:            opts.artifactsDir,
		MaxForks:                opts.maxForks,
		RunTimeout:              opts.runTimeout,
		LogRetention:            opts.logRetention,
		MaxConcurrentReconciles: opts.maxConcurrentReconciles,
		MaxConcurrentProbes:     opts.maxConcurrentProbes,
		UserRolesDir:            opts.userRolesDir,
		ConfigMapUserRoles:      opts.configMapUserRoles,
		MaxSnapshotBytes:        maxSnapshot.Value(),
		Policy:                  policy,
	})
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}

	ctrl.Log.WithName("setup").Info("Starting manager", "stateDir", opts.stateDir, "watchNamespaces", opts.watchNamespaces)
	return mgr.Start(ctrl.SetupSignalHandler())
}

// jobExecutor makes the executor of --executor=job, or nil for process.
func jobExecutor(opts options, mgr ctrl.Manager) (controller.RemoteExecutor, error) {
	switch opts.executor {
	case "process":
		return nil, nil
	case "job":
	default:
		return nil, fmt.Errorf("--executor must be process or job, got %q", opts.executor)
	}
	if opts.jobImage == "" {
		return nil, fmt.Errorf("--executor=job needs --job-image, the manager's own image")
	}
	policy := corev1.PullPolicy(opts.jobPullPolicy)
	if policy != corev1.PullAlways && policy != corev1.PullIfNotPresent && policy != corev1.PullNever {
		return nil, fmt.Errorf("--job-image-pull-policy must be Always, IfNotPresent or Never, got %q", opts.jobPullPolicy)
	}
	resources := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, q := range []struct {
		flag, value string
		into        corev1.ResourceList
		name        corev1.ResourceName
	}{
		{"--job-cpu-request", opts.jobCPURequest, resources.Requests, corev1.ResourceCPU},
		{"--job-memory-request", opts.jobMemoryRequest, resources.Requests, corev1.ResourceMemory},
		{"--job-memory-limit", opts.jobMemoryLimit, resources.Limits, corev1.ResourceMemory},
	} {
		v, err := resource.ParseQuantity(q.value)
		if err != nil || v.Sign() < 0 {
			return nil, fmt.Errorf("%s must be a quantity such as 512Mi, got %q", q.flag, q.value)
		}
		if !v.IsZero() {
			q.into[q.name] = v
		}
	}
	clientset, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("creating the client of run Jobs' logs: %w", err)
	}
	var pullSecrets []corev1.LocalObjectReference
	for _, name := range splitList(opts.jobPullSecrets) {
		pullSecrets = append(pullSecrets, corev1.LocalObjectReference{Name: name})
	}
	return &jobexec.Executor{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Clientset: clientset,
		Image: opts.jobImage, PullPolicy: policy, PullSecrets: pullSecrets, Resources: resources,
		StateDir: opts.stateDir, UID: jobexec.ImageUID, GID: jobexec.ImageUID,
	}, nil
}

// tenancyPolicy reads the flags of what tenants may ask for.
func tenancyPolicy(opts options) (controller.Policy, error) {
	p := controller.Policy{
		ArtifactPaths:        splitList(opts.allowedArtifactPaths),
		ArtifactURLs:         splitList(opts.allowedArtifactURLs),
		InClusterNamespaces:  splitList(opts.allowedInClusterNS),
		InClusterHostPath:    opts.allowInClusterHostPath,
		InClusterTolerations: opts.allowInClusterTolerations,
	}
	for _, d := range p.ArtifactPaths {
		if !filepath.IsAbs(d) {
			return p, fmt.Errorf("--allowed-artifact-paths: %q is not an absolute path", d)
		}
	}
	for _, u := range p.ArtifactURLs {
		if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
			return p, fmt.Errorf("--allowed-artifact-urls: %q is not an http:// or https:// URL prefix", u)
		}
	}
	for _, ns := range p.InClusterNamespaces {
		if _, err := path.Match(ns, ""); err != nil {
			return p, fmt.Errorf("--allowed-in-cluster-namespaces: %q is not a pattern: %w", ns, err)
		}
	}
	return p, nil
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// cacheOptions confines the manager's watches to the namespaces of
// --watch-namespaces; with none it watches every namespace (and needs the
// ClusterRole of config/rbac).
func cacheOptions(namespaces string) (cache.Options, error) {
	if strings.TrimSpace(namespaces) == "" {
		return cache.Options{}, nil
	}
	out := map[string]cache.Config{}
	for _, ns := range strings.Split(namespaces, ",") {
		ns = strings.TrimSpace(ns)
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return cache.Options{}, fmt.Errorf("--watch-namespaces: %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
		out[ns] = cache.Config{}
	}
	return cache.Options{DefaultNamespaces: out}, nil
}
