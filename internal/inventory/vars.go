package inventory

import (
	"encoding/json"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
)

// Defaults the API documents; the inventory spells them out so roles need no defaults of their own.
const (
	defaultSSHPort         = 22
	defaultSSHUser         = "root"
	defaultSecurePort      = 5443
	defaultServiceSubnet   = "10.96.0.0/12"
	defaultServiceType     = "ClusterIP"
	defaultEtcdDataDir     = "/var/lib/karmada-etcd"
	defaultEtcdKeyPrefix   = "/registry"
	defaultEtcdStorageType = "PersistentVolumeClaim"
	defaultEtcdStorageSize = "5Gi"
	defaultReplicas        = 1
	defaultHostClusterNS   = "karmada-system"
	defaultHostClusterDNS  = "cluster.local"
	// unsetVersion stands for a version the CR leaves open: roles take the artifacts bundle's.
	unsetVersion = ""
)

// Literals kao writes itself; none comes from the CR, so none is wrapped.
const (
	localConnection = "local"
	// playbookPythonTemplate makes local hosts use the Python that runs ansible-playbook.
	playbookPythonTemplate = "{{ ansible_playbook_python }}"
	becomeMethodSudo       = "sudo"
	// The addressType values of an EndpointSlice.
	addressTypeIPv4 = "IPv4"
	addressTypeIPv6 = "IPv6"
	addressTypeFQDN = "FQDN"
	// EtcdStatefulSet is the StatefulSet of a Containerized managed etcd and
	// its headless Service: each member is a pod <EtcdStatefulSet>-<i>, named
	// <pod>.<EtcdStatefulSet>.<namespace>.svc in the host cluster. The
	// karmada_workloads role creates it under this name.
	EtcdStatefulSet = "karmada-etcd"
)

// EtcdPodNames are the pods of a Containerized managed etcd, its members:
// <EtcdStatefulSet>-<i> for each of spec.etcd.managed.replicas (default 1).
// The operator (certificates, probes, claims) and the karmada_workloads role
// (kao_etcd.pod_names) both take them from here.
func EtcdPodNames(kd *kaov1.KarmadaDeployment) []string {
	n := defaultReplicas
	if m := kd.Spec.Etcd.Managed; m != nil && m.Replicas != nil {
		n = int(*m.Replicas)
	}
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, EtcdStatefulSet+"-"+strconv.Itoa(i))
	}
	return out
}

// str wraps s as an unsafe string, or returns def (our own literal) when s is empty.
func str(s, def string) any {
	if s == "" {
		return def
	}
	return unsafe(s)
}

// strs wraps every element of ss as an unsafe string, sorted: the API lists them as sets.
func strs(ss []string) []any {
	sorted := slices.Clone(ss)
	sort.Strings(sorted)
	out := make([]any, 0, len(sorted))
	for _, s := range sorted {
		out = append(out, unsafe(s))
	}
	return out
}

// sshHostVars are the variables of one SSH host of a Binary control plane. The
// connection variables come from fields validate checked.
func sshHostVars(h kaov1.Host, becomeSudo bool) vars {
	port := int(h.Port)
	if port == 0 {
		port = defaultSSHPort
	}
	roles := make([]string, 0, len(h.Roles))
	for _, r := range h.Roles {
		if !slices.Contains(roles, string(r)) {
			roles = append(roles, string(r))
		}
	}
	v := vars{
		"ansible_host":     unsafe(h.Address),
		"ansible_port":     port,
		"ansible_user":     str(h.User, defaultSSHUser),
		"kao_host_name":    unsafe(h.Name),
		"kao_host_address": unsafe(h.Address),
		"kao_host_roles":   strs(roles),
	}
	if becomeSudo {
		v["ansible_become"] = true
		v["ansible_become_method"] = becomeMethodSudo
	}
	return v
}

// localVars are the connection variables of a host that runs its tasks on the
// controller: the host cluster and the members, reached with kubeconfigs.
func localVars() vars {
	return vars{
		"ansible_connection":         localConnection,
		"ansible_python_interpreter": playbookPythonTemplate,
	}
}

// memberKubeconfig adds kao_member_kubeconfig when the runner says where it wrote the file.
func memberKubeconfig(v vars, name string, opts Options) {
	if opts.MemberKubeconfigPath == nil {
		return
	}
	if p := opts.MemberKubeconfigPath(name); p != "" {
		v["kao_member_kubeconfig"] = unsafe(p)
	}
}

// memberIdentity adds what a member's karmada-agent is in karmada-apiserver,
// as kao's PKI issues it: the name of its client certificate in the PKI
// directory and its user name (the certificate's subject).
func memberIdentity(v vars, name string) {
	v["kao_member_agent_certificate"] = unsafe(pki.AgentClient(name))
	v["kao_member_agent_user"] = unsafe(pki.AgentUser(name))
}

// specMemberVars are the variables of a member listed in spec.members.
func specMemberVars(m kaov1.MemberSpec, opts Options) vars {
	v := localVars()
	v["kao_member_name"] = unsafe(m.Name)
	memberIdentity(v, m.Name)
	v["kao_member_sync_mode"] = unsafe(string(m.SyncMode))
	memberKubeconfig(v, m.Name, opts)
	if m.Context != "" {
		v["kao_member_context"] = unsafe(m.Context)
	}
	if m.Provider != "" {
		v["kao_member_provider"] = unsafe(m.Provider)
	}
	if m.Region != "" {
		v["kao_member_region"] = unsafe(m.Region)
	}
	if len(m.Zones) > 0 {
		v["kao_member_zones"] = strs(m.Zones)
	}
	return v
}

// statusMemberVars are the variables of a member that left spec.members but is still
// joined: what status.members recorded when it joined.
func statusMemberVars(m kaov1.MemberStatus, opts Options) vars {
	v := localVars()
	v["kao_member_name"] = unsafe(m.Name)
	memberIdentity(v, m.Name)
	if m.SyncMode != "" {
		v["kao_member_sync_mode"] = unsafe(string(m.SyncMode))
	}
	// Without a recorded Secret there is no kubeconfig for the runner to write.
	if m.KubeconfigSecretRef != nil {
		memberKubeconfig(v, m.Name, opts)
	}
	return v
}

// deploymentVars are the group variables of all: every deployment-wide setting a
// role reads, each named here and nowhere taken from the CR.
func deploymentVars(kd *kaov1.KarmadaDeployment) vars {
	spec := &kd.Spec
	containerized := spec.Mode == kaov1.ContainerizedMode

	securePort := int(spec.APIServer.SecurePort)
	if securePort == 0 {
		securePort = defaultSecurePort
	}
	karmadaVersion := str(spec.Version, unsetVersion)
	kubeVersion := str(spec.KubernetesVersion, unsetVersion)

	v := vars{
		"kao_deployment_name":      str(kd.Name, ""),
		"kao_deployment_namespace": str(kd.Namespace, ""),
		"kao_deployment_uid":       str(string(kd.UID), ""),
		"kao_mode":                 unsafe(string(spec.Mode)),
		"kao_karmada_version":      karmadaVersion,
		"kao_kubernetes_version":   kubeVersion,
		"kao_api_secure_port":      securePort,
		"kao_api_cert_sans":        strs(spec.APIServer.CertSANs),
		"kao_api_service_subnet":   str(spec.APIServer.ServiceSubnet, defaultServiceSubnet),
		"kao_image_registry":       str(spec.Artifacts.ImageRegistry, ""),
		"kao_etcd":                 etcdVars(kd, containerized),
		"kao_apiserver_hosts":      hostGroupVars(spec, kaov1.APIServerRole),
		"kao_control_plane_hosts":  hostGroupVars(spec, kaov1.ControlPlaneRole),
		"kao_components": map[string]any{
			"apiserver":               componentVars(spec.APIServer.ComponentSpec, kubeVersion, containerized),
			"aggregated_apiserver":    componentVars(spec.Components.AggregatedAPIServer, karmadaVersion, containerized),
			"kube_controller_manager": componentVars(spec.Components.KubeControllerManager, kubeVersion, containerized),
			"controller_manager":      componentVars(spec.Components.ControllerManager, karmadaVersion, containerized),
			"scheduler":               componentVars(spec.Components.Scheduler, karmadaVersion, containerized),
			"webhook":                 componentVars(spec.Components.Webhook, karmadaVersion, containerized),
		},
		"kao_addons": map[string]any{
			"search":              addonVars(spec.Addons.Search, karmadaVersion, containerized),
			"descheduler":         addonVars(spec.Addons.Descheduler, karmadaVersion, containerized),
			"metrics_adapter":     addonVars(spec.Addons.MetricsAdapter, karmadaVersion, containerized),
			"scheduler_estimator": addonVars(spec.Addons.SchedulerEstimator, karmadaVersion, containerized),
		},
	}
	if ep := apiEndpoint(spec, securePort); ep != nil {
		v["kao_api_endpoint"] = ep
	}
	if uid := kd.Annotations[kaov1.TakeOverFromAnnotation]; uid != "" {
		v["kao_take_over_from"] = unsafe(uid)
	}
	if kd.Annotations[kaov1.MembersGoneAnnotation] == "true" {
		// The uninstall revokes Karmada's access in no member.
		v["kao_members_gone"] = true
	}
	if kd.Status.Version != "" {
		// The deployment installed before: what it left on its hosts before
		// kao wrote owner markers is its own.
		v["kao_installed_before"] = true
	}
	if containerized {
		v["kao_api_service_type"] = str(string(spec.APIServer.ServiceType), defaultServiceType)
		hc := spec.HostCluster
		if hc == nil {
			hc = &kaov1.HostClusterSpec{}
		}
		namespace, dnsDomain := hc.Namespace, hc.DNSDomain
		if namespace == "" {
			namespace = defaultHostClusterNS
		}
		if dnsDomain == "" {
			dnsDomain = defaultHostClusterDNS
		}
		v["kao_host_cluster"] = map[string]any{
			"namespace":  str(hc.Namespace, defaultHostClusterNS),
			"dns_domain": str(hc.DNSDomain, defaultHostClusterDNS),
			// The DNS suffix of the namespace's Services, <namespace>.svc.<domain>.
			"service_domain": unsafe(namespace + ".svc." + dnsDomain),
			"in_cluster":     hc.InCluster,
			"affinity_json":  jsonVar(hc.Affinity),
		}
		v["kao_image_pull_secret"] = str(spec.Artifacts.ImagePullSecretName, "")
	}
	return v
}

// jsonVar renders a Kubernetes structure from the CR (resources, tolerations,
// affinity) as one JSON string, unsafe like every CR string: roles insert it
// into manifests as it is (JSON is YAML) and never template it. Maps in
// these structures take their keys from the CR too (label keys, resource
// names), and Ansible would template a dictionary's keys: as a string, they
// are data. A nil value renders as "null".
func jsonVar(v any) unsafe {
	data, err := json.Marshal(v)
	if err != nil {
		// Only types of the API reach here, and they all marshal.
		panic("inventory: marshalling an API structure: " + err.Error())
	}
	return unsafe(data)
}

// apiEndpoint is spec.apiServer.endpoint, or the first apiServer host's address and
// the secure port; nil when neither is known (Containerized without an endpoint).
func apiEndpoint(spec *kaov1.KarmadaDeploymentSpec, securePort int) any {
	if spec.APIServer.Endpoint != "" {
		return unsafe(spec.APIServer.Endpoint)
	}
	if spec.Mode != kaov1.BinaryMode {
		return nil
	}
	for _, h := range spec.Hosts {
		if slices.Contains(h.Roles, kaov1.APIServerRole) {
			return unsafe(net.JoinHostPort(h.Address, strconv.Itoa(securePort)))
		}
	}
	return nil
}

// etcdVars is kao_etcd: a managed cluster's settings, or an external cluster's endpoints.
func etcdVars(kd *kaov1.KarmadaDeployment, containerized bool) map[string]any {
	spec := &kd.Spec
	if ext := spec.Etcd.External; ext != nil {
		return map[string]any{
			"managed":    false,
			"endpoints":  strs(ext.Endpoints),
			"key_prefix": str(ext.KeyPrefix, defaultEtcdKeyPrefix),
		}
	}
	m := spec.Etcd.Managed
	out := map[string]any{
		"managed":              true,
		"version":              str(m.Version, unsetVersion),
		"data_dir":             str(m.DataDir, defaultEtcdDataDir),
		"purge_data_on_delete": m.PurgeDataOnDelete,
		"extra_args":           argVars(m.ExtraArgs),
	}
	// The hosts of the etcd group, in its order (none in Containerized mode,
	// whose members are pod_names'): the roles build the initial cluster and the
	// API servers' --etcd-servers from them.
	members := []any{}
	for _, h := range hostsWithRole(spec, kaov1.EtcdRole) {
		members = append(members, map[string]any{"name": unsafe(h.Name), "url_host": unsafe(urlHost(h.Address))})
	}
	out["members"] = members
	if containerized {
		size := ""
		if m.Storage.Size != nil {
			size = m.Storage.Size.String()
		}
		// The StatefulSet's pods, one per replica: the role builds the
		// initial cluster and picks the certificates' files by them.
		pods := []any{}
		for _, p := range EtcdPodNames(kd) {
			pods = append(pods, p)
		}
		out["replicas"] = len(pods)
		out["pod_names"] = pods
		out["storage"] = map[string]any{
			"type":               str(string(m.Storage.Type), defaultEtcdStorageType),
			"size":               str(size, defaultEtcdStorageSize),
			"storage_class_name": str(m.Storage.StorageClassName, ""),
		}
		out["resources_json"] = jsonVar(m.Resources)
		out["tolerations_json"] = jsonVar(m.Tolerations)
	}
	return out
}

// componentVars is one entry of kao_components: the effective version (the
// component's override or its family's version), flags and feature gates, and the
// replica count in Containerized mode.
func componentVars(c kaov1.ComponentSpec, familyVersion any, containerized bool) map[string]any {
	version := familyVersion
	if c.Version != "" {
		version = unsafe(c.Version)
	}
	gates := slices.Clone(c.FeatureGates)
	sort.SliceStable(gates, func(i, j int) bool { return gates[i].Name < gates[j].Name })
	fg := make([]any, 0, len(gates))
	for _, g := range gates {
		fg = append(fg, map[string]any{"name": unsafe(g.Name), "enabled": g.Enabled})
	}
	out := map[string]any{
		"version":       version,
		"extra_args":    argVars(c.ExtraArgs),
		"feature_gates": fg,
	}
	if containerized {
		replicas := defaultReplicas
		if c.Replicas != nil {
			replicas = int(*c.Replicas)
		}
		out["replicas"] = replicas
		out["resources_json"] = jsonVar(c.Resources)
		out["tolerations_json"] = jsonVar(c.Tolerations)
	}
	return out
}

// addonVars is one entry of kao_addons: enabled, plus the component settings.
func addonVars(a *kaov1.AddonSpec, karmadaVersion any, containerized bool) map[string]any {
	if a == nil {
		a = &kaov1.AddonSpec{}
	}
	out := componentVars(a.ComponentSpec, karmadaVersion, containerized)
	out["enabled"] = a.Enabled
	return out
}

// argVars renders extra flags as a list of {name, value}, sorted by name (the API
// keys the list by name, so its order carries no meaning).
func argVars(args []kaov1.Arg) []any {
	sorted := slices.Clone(args)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	out := make([]any, 0, len(sorted))
	for _, a := range sorted {
		out = append(out, map[string]any{"name": unsafe(a.Name), "value": str(a.Value, "")})
	}
	return out
}

// hostsWithRole are the spec.hosts with role r in name order, the order of
// their inventory group (a Containerized deployment has none).
func hostsWithRole(spec *kaov1.KarmadaDeploymentSpec, r kaov1.HostRole) []kaov1.Host {
	if spec.Mode != kaov1.BinaryMode {
		return nil
	}
	var out []kaov1.Host
	for _, h := range spec.Hosts {
		if slices.Contains(h.Roles, r) {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// urlHost is an address as the host part of a URL: an IPv6 address (any
// address with a colon) in brackets.
func urlHost(address string) string {
	if strings.Contains(address, ":") {
		return "[" + address + "]"
	}
	return address
}

// ipv4Pattern is what the roles took for an IPv4 address: four dot-separated
// groups of one to three digits.
var ipv4Pattern = regexp.MustCompile(`^[0-9]{1,3}([.][0-9]{1,3}){3}$`)

// hostGroupVars are the addresses of the hosts with role r, in their group's
// order, and the addressType of an EndpointSlice of them: IPv4 when every
// address is one (so also when there is none), IPv6 when every address has a
// colon, FQDN otherwise.
func hostGroupVars(spec *kaov1.KarmadaDeploymentSpec, r kaov1.HostRole) map[string]any {
	addresses := []any{}
	allIPv4, allIPv6 := true, true
	for _, h := range hostsWithRole(spec, r) {
		addresses = append(addresses, unsafe(h.Address))
		allIPv4 = allIPv4 && ipv4Pattern.MatchString(h.Address)
		allIPv6 = allIPv6 && strings.Contains(h.Address, ":")
	}
	addressType := addressTypeFQDN
	switch {
	case allIPv4:
		addressType = addressTypeIPv4
	case allIPv6:
		addressType = addressTypeIPv6
	}
	return map[string]any{"addresses": addresses, "address_type": addressType}
}

// membersVar is kao_members: the spec.members in name order, each with its
// index in that order (karmada_addons numbers the estimators' ports by it),
// its kubeconfig on the controller (when the runner wrote one) and its
// context ("" for either when unset).
func membersVar(members []kaov1.MemberSpec, opts Options) []any {
	sorted := slices.Clone(members)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	out := []any{}
	for i, m := range sorted {
		kubeconfig := any("")
		if opts.MemberKubeconfigPath != nil {
			kubeconfig = str(opts.MemberKubeconfigPath(m.Name), "")
		}
		out = append(out, map[string]any{"name": unsafe(m.Name), "index": i, "kubeconfig": kubeconfig, "context": str(m.Context, "")})
	}
	return out
}
