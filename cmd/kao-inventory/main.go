// Command kao-inventory is kao's dynamic Ansible inventory: an inventory script that
// turns one KarmadaDeployment into groups and host variables.
//
// Ansible runs it with `--list` (and, in principle, `--host NAME`) and nothing else,
// so everything else can also come from the environment:
//
//	KAO_INVENTORY_FILE                  a KarmadaDeployment YAML or JSON file (or --file)
//	KAO_INVENTORY_NAMESPACE             namespace of a live KarmadaDeployment (or --namespace)
//	KAO_INVENTORY_NAME                  name of a live KarmadaDeployment (or --name)
//	KAO_INVENTORY_MEMBER_KUBECONFIG_DIR directory holding <member>.kubeconfig files (or --member-kubeconfig-dir)
//	KUBECONFIG                          kubeconfig for the live object (or --kubeconfig)
//
// Example:
//
//	KAO_INVENTORY_FILE=dc1.yaml ansible-playbook -i bin/kao-inventory site.yml
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/inventory"
)

// Environment variables, for when Ansible runs the script with only --list.
const (
	envFile                = "KAO_INVENTORY_FILE"
	envNamespace           = "KAO_INVENTORY_NAMESPACE"
	envName                = "KAO_INVENTORY_NAME"
	envMemberKubeconfigDir = "KAO_INVENTORY_MEMBER_KUBECONFIG_DIR"
)

// apiTimeout bounds reading the KarmadaDeployment from the API server: Ansible waits
// for the script with no timeout of its own.
const apiTimeout = 30 * time.Second

// Exit codes.
const (
	exitError = 1
	exitUsage = 2
)

// options are the command-line settings, after the environment filled the gaps.
type options struct {
	list                bool
	host                string
	file                string
	namespace           string
	name                string
	memberKubeconfigDir string
}

// usageError is a mistake in how the command was called.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	opts := options{}
	fs := flag.CommandLine // controller-runtime's config package registers --kubeconfig here.
	fs.BoolVar(&opts.list, "list", false, "Print the whole inventory (Ansible's inventory script protocol).")
	fs.StringVar(&opts.host, "host", "", "Print the variables of one host (Ansible's inventory script protocol).")
	fs.StringVar(&opts.file, "file", "", "KarmadaDeployment YAML or JSON file. Env: "+envFile+".")
	fs.StringVar(&opts.namespace, "namespace", "", "Namespace of a live KarmadaDeployment. Env: "+envNamespace+".")
	fs.StringVar(&opts.name, "name", "", "Name of a live KarmadaDeployment. Env: "+envName+".")
	fs.StringVar(&opts.memberKubeconfigDir, "member-kubeconfig-dir", "", "Directory with one <member>.kubeconfig per member cluster; sets kao_member_kubeconfig. Env: "+envMemberKubeconfigDir+".")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: %s --list | --host NAME\n\n", filepath.Base(os.Args[0]))
		fmt.Fprintf(os.Stderr, "kao's dynamic Ansible inventory for one KarmadaDeployment, read from a file\n")
		fmt.Fprintf(os.Stderr, "(--file or %s) or from the API server (--namespace and --name, or\n", envFile)
		fmt.Fprintf(os.Stderr, "%s and %s; kubeconfig from --kubeconfig or KUBECONFIG).\n\n", envNamespace, envName)
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(exitUsage) // flag.CommandLine exits on errors itself; this is belt and braces.
	}
	fromEnv(&opts)

	// The API client logs through controller-runtime; without a logger it warns on stderr.
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr)))

	if err := run(opts, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "kao-inventory: %v\n", err)
		if errors.As(err, new(usageError)) {
			fmt.Fprintf(os.Stderr, "Run %s -h for help.\n", filepath.Base(os.Args[0]))
			os.Exit(exitUsage)
		}
		os.Exit(exitError)
	}
}

// fromEnv fills the settings that no flag set from the environment.
func fromEnv(opts *options) {
	for _, s := range []struct {
		value *string
		env   string
	}{
		{&opts.file, envFile},
		{&opts.namespace, envNamespace},
		{&opts.name, envName},
		{&opts.memberKubeconfigDir, envMemberKubeconfigDir},
	} {
		if *s.value == "" {
			*s.value = os.Getenv(s.env)
		}
	}
}

// run loads the KarmadaDeployment, builds the inventory and prints what was asked.
func run(opts options, out io.Writer) error {
	if opts.list == (opts.host != "") {
		return usageError{"pass exactly one of --list and --host NAME"}
	}
	kd, err := load(opts)
	if err != nil {
		return err
	}

	buildOpts := inventory.Options{}
	if opts.memberKubeconfigDir != "" {
		dir, err := filepath.Abs(opts.memberKubeconfigDir)
		if err != nil {
			return fmt.Errorf("resolving member kubeconfig directory %s: %w", opts.memberKubeconfigDir, err)
		}
		buildOpts.MemberKubeconfigPath = func(member string) string {
			return filepath.Join(dir, member+".kubeconfig")
		}
	}
	inv, err := inventory.Build(kd, buildOpts)
	if err != nil {
		return fmt.Errorf("%w; fix the KarmadaDeployment and run again", err)
	}

	var data []byte
	if opts.list {
		data, err = inv.ScriptJSON()
	} else {
		data, err = inv.HostJSON(opts.host)
	}
	if err != nil {
		return err
	}
	_, err = out.Write(data)
	return err
}

// load reads the KarmadaDeployment from the file or the API server the options name.
func load(opts options) (*kaov1.KarmadaDeployment, error) {
	live := opts.namespace != "" || opts.name != ""
	switch {
	case opts.file != "" && live:
		return nil, usageError{fmt.Sprintf("got both a file (%s) and a live object (namespace %q, name %q); set only one of --file/%s and --namespace+--name/%s+%s",
			opts.file, opts.namespace, opts.name, envFile, envNamespace, envName)}
	case opts.file != "":
		return loadFile(opts.file)
	case opts.namespace == "" || opts.name == "":
		return nil, usageError{fmt.Sprintf("no KarmadaDeployment to read: set --file (or %s) to a YAML or JSON file, or both --namespace and --name (or %s and %s) for a live object",
			envFile, envNamespace, envName)}
	default:
		return loadLive(opts.namespace, opts.name)
	}
}

// loadFile reads a KarmadaDeployment from a YAML or JSON file. Unknown fields are
// errors: a misspelt optional field would otherwise silently fall back to its default.
func loadFile(path string) (*kaov1.KarmadaDeployment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading KarmadaDeployment file: %w", err)
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return nil, fmt.Errorf("parsing %s as YAML or JSON: %w", path, err)
	}
	want := kaov1.GroupVersion.String()
	if tm.Kind != "KarmadaDeployment" || tm.APIVersion != want {
		hint := ""
		if tm.Kind == "List" || tm.Kind == "KarmadaDeploymentList" {
			hint = " (a list: export one object with `kubectl get kd NAME -o yaml`)"
		}
		return nil, fmt.Errorf("%s holds apiVersion %q kind %q%s; want apiVersion %s, kind KarmadaDeployment",
			path, tm.APIVersion, tm.Kind, hint, want)
	}
	kd := &kaov1.KarmadaDeployment{}
	if err := yaml.UnmarshalStrict(data, kd); err != nil {
		return nil, fmt.Errorf("parsing %s as a KarmadaDeployment: %w", path, err)
	}
	return kd, nil
}

// loadLive reads a KarmadaDeployment from the API server of the current kubeconfig.
func loadLive(namespace, name string) (*kaov1.KarmadaDeployment, error) {
	cfg, err := config.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig (set --kubeconfig or KUBECONFIG): %w", err)
	}
	scheme := runtime.NewScheme()
	if err := kaov1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering the kao.io API: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating API client for %s: %w", cfg.Host, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()

	kd := &kaov1.KarmadaDeployment{}
	key := types.NamespacedName{Namespace: namespace, Name: name}
	if err := c.Get(ctx, key, kd); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("KarmadaDeployment %s not found on %s: check --namespace and --name (or %s and %s)", key, cfg.Host, envNamespace, envName)
		case apierrors.IsForbidden(err):
			return nil, fmt.Errorf("reading KarmadaDeployment %s on %s: %w (the kubeconfig's user needs get on karmadadeployments.kao.io)", key, cfg.Host, err)
		default:
			return nil, fmt.Errorf("reading KarmadaDeployment %s on %s: %w", key, cfg.Host, err)
		}
	}
	return kd, nil
}
