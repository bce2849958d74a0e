package inventory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
)

// Group names of kao's inventory. The API's InventoryGroup enum lists the same names.
const (
	// GroupAll is Ansible's implicit group of every host; it carries the deployment-wide kao_ variables.
	GroupAll = "all"
	// GroupUngrouped is Ansible's implicit group of hosts in no other group.
	GroupUngrouped = "ungrouped"
	// GroupEtcd holds the hosts with the etcd role when spec.etcd.managed is set.
	GroupEtcd = "etcd"
	// GroupAPIServer holds the hosts with the apiServer role.
	GroupAPIServer = "karmada_apiserver"
	// GroupControlPlane holds the hosts with the controlPlane role.
	GroupControlPlane = "karmada_control_plane"
	// GroupHostCluster holds HostClusterHost in Containerized mode.
	GroupHostCluster = "host_cluster"
	// GroupMembers holds a host for every spec.members entry.
	GroupMembers = "members"
	// GroupMembersJoin holds the members of spec.members that status.members does not record as
	// joined, and the joined Pull members whose current karmada-agent certificate is not the one
	// status.members records as delivered (a renewed certificate reaches the member by joining again).
	GroupMembersJoin = "members_join"
	// GroupMembersUnjoin holds the members joined in status.members that spec.members no longer lists.
	GroupMembersUnjoin = "members_unjoin"
)

// Groups of an upgrade (playbooks/upgrade.yml): the hosts each component moves
// on, one host at a time, in host name order. They exist only in the
// inventory of an upgrade run (Options.Upgrade); an empty group skips its step.
const (
	// GroupUpgradeAPIServer holds the apiServer hosts whose karmada-apiserver moves.
	GroupUpgradeAPIServer = "upgrade_karmada_apiserver"
	// GroupUpgradeKubeControllerManager holds the controlPlane hosts whose kube-controller-manager moves.
	GroupUpgradeKubeControllerManager = "upgrade_kube_controller_manager"
	// GroupUpgradeResources holds the apiServer hosts when Karmada's CRDs and objects move to spec.version.
	GroupUpgradeResources = "upgrade_karmada_resources"
	// GroupUpgradeAggregatedAPIServer holds the apiServer hosts whose karmada-aggregated-apiserver moves.
	GroupUpgradeAggregatedAPIServer = "upgrade_karmada_aggregated_apiserver"
	// GroupUpgradeWebhook holds the controlPlane hosts whose karmada-webhook moves.
	GroupUpgradeWebhook = "upgrade_karmada_webhook"
	// GroupUpgradeControllerManager holds the controlPlane hosts whose karmada-controller-manager moves.
	GroupUpgradeControllerManager = "upgrade_karmada_controller_manager"
	// GroupUpgradeScheduler holds the controlPlane hosts whose karmada-scheduler moves.
	GroupUpgradeScheduler = "upgrade_karmada_scheduler"
)

// UpgradeGroups are the groups of an upgrade, in the order upgrade.yml runs them.
var UpgradeGroups = []string{
	GroupUpgradeAPIServer, GroupUpgradeKubeControllerManager, GroupUpgradeResources,
	GroupUpgradeAggregatedAPIServer, GroupUpgradeWebhook, GroupUpgradeControllerManager, GroupUpgradeScheduler,
}

// HostClusterHost is the host that stands for the host cluster in Containerized mode.
// It runs its tasks on the controller with a local connection.
const HostClusterHost = "host_cluster"

// MemberHostPrefix starts the host name of every member cluster. An underscore
// cannot appear in a DNS-1123 host name, so member hosts never clash with SSH hosts.
const MemberHostPrefix = "member_"

// namedGroups are the groups kao always emits, next to all and ungrouped.
var namedGroups = []string{
	GroupEtcd, GroupAPIServer, GroupControlPlane, GroupHostCluster,
	GroupMembers, GroupMembersJoin, GroupMembersUnjoin,
}

// MemberHost returns the inventory host name of the member cluster called name.
func MemberHost(name string) string { return MemberHostPrefix + name }

// Options carry run-time facts that are not in the CR.
type Options struct {
	// MemberKubeconfigPath returns the file path where the member's kubeconfig has been
	// written (the runner materialises Secrets into its run directory). nil: omit kao_member_kubeconfig.
	// An empty path omits it for that member. For members_unjoin hosts it is called only when
	// status.members recorded a kubeconfigSecretRef.
	MemberKubeconfigPath func(member string) string
	// AgentCertificateNotAfter returns when the current karmada-agent certificate of
	// the Pull member expires (ok false when there is none). nil: read it from
	// status.certificates (karmada-agent-<member>).
	AgentCertificateNotAfter func(member string) (notAfter time.Time, ok bool)
	// Upgrade maps upgrade groups (UpgradeGroups) to the hosts of spec.hosts
	// they hold (Containerized: HostClusterHost), for an upgrade run: the
	// operator decides them from the versions status says run and those the
	// spec asks for. nil: no upgrade groups. Every group given is emitted,
	// empty ones included.
	Upgrade map[string][]string

	// HostClusterKubeconfigPath is where the runner wrote the kubeconfig of the
	// host cluster (Containerized): the Secret spec.hostCluster.kubeconfigSecretRef
	// names, or one for the operator's own cluster. Empty omits kao_host_cluster.kubeconfig.
	HostClusterKubeconfigPath string

	// APIEndpoint is karmada-apiserver's host:port as the operator resolved it
	// from the host cluster (Containerized without spec.apiServer.endpoint: the
	// Service's DNS name, a node's address and node port, or the load
	// balancer's address). spec.apiServer.endpoint wins over it; empty adds nothing.
	APIEndpoint string
}

// Inventory is kao's Ansible inventory for one KarmadaDeployment. Build makes one;
// the *JSON methods render it for Ansible.
type Inventory struct {
	// groups maps every group but all to its sorted host names; ungrouped included.
	groups map[string][]string
	// allVars are the group variables of all: the deployment-wide kao_ settings.
	allVars vars
	// hostVars maps every host to its variables.
	hostVars map[string]vars
}

// vars are Ansible variables. Values are int, int32, bool, string (our own
// literals), unsafe (strings from the CR), []any and map[string]any; nothing else.
type vars = map[string]any

// unsafe is a string that came from the CR. It renders as {"__ansible_unsafe": "..."},
// which ansible-core decodes as a string it never templates.
type unsafe string

// MarshalJSON renders s as Ansible's unsafe-string marker.
func (s unsafe) MarshalJSON() ([]byte, error) {
	return encode(map[string]string{"__ansible_unsafe": string(s)}, false)
}

// Build validates kd and turns it into an inventory. It checks again every field that
// becomes a host name or a connection variable, whatever the API server checked, and
// returns an error naming each bad field path.
func Build(kd *kaov1.KarmadaDeployment, opts Options) (*Inventory, error) {
	if kd == nil {
		return nil, errors.New("building inventory: no KarmadaDeployment given")
	}
	if errs := validate(kd); len(errs) > 0 {
		return nil, fmt.Errorf("building inventory for KarmadaDeployment %s/%s: %w", kd.Namespace, kd.Name, errs.ToAggregate())
	}

	inv := &Inventory{
		groups:   map[string][]string{},
		hostVars: map[string]vars{},
		allVars:  deploymentVars(kd),
	}
	if _, set := inv.allVars["kao_api_endpoint"]; !set && opts.APIEndpoint != "" {
		inv.allVars["kao_api_endpoint"] = unsafe(opts.APIEndpoint)
	}
	inv.allVars["kao_members"] = membersVar(kd.Spec.Members, opts)
	if hc, ok := inv.allVars["kao_host_cluster"].(map[string]any); ok && opts.HostClusterKubeconfigPath != "" {
		hc["kubeconfig"] = unsafe(opts.HostClusterKubeconfigPath)
	}
	for _, g := range namedGroups {
		inv.groups[g] = []string{}
	}

	if kd.Spec.Mode == kaov1.BinaryMode {
		become := kd.Spec.SSH != nil && kd.Spec.SSH.Become == kaov1.BecomeSudo
		for _, h := range kd.Spec.Hosts {
			inv.hostVars[h.Name] = sshHostVars(h, become)
			for _, r := range h.Roles {
				switch r {
				case kaov1.EtcdRole:
					if kd.Spec.Etcd.Managed != nil {
						inv.add(GroupEtcd, h.Name)
					}
				case kaov1.APIServerRole:
					inv.add(GroupAPIServer, h.Name)
				case kaov1.ControlPlaneRole:
					inv.add(GroupControlPlane, h.Name)
				}
			}
		}
	} else {
		inv.hostVars[HostClusterHost] = localVars()
		inv.add(GroupHostCluster, HostClusterHost)
	}
	for _, g := range sortedKeys(opts.Upgrade) {
		if !slices.Contains(UpgradeGroups, g) {
			return nil, fmt.Errorf("building inventory for KarmadaDeployment %s/%s: %q is not an upgrade group (%v)", kd.Namespace, kd.Name, g, UpgradeGroups)
		}
		inv.groups[g] = []string{}
		for _, h := range opts.Upgrade[g] {
			if kd.Spec.Mode == kaov1.ContainerizedMode && h != HostClusterHost {
				return nil, fmt.Errorf("building inventory for KarmadaDeployment %s/%s: upgrade group %s names %q: a Containerized upgrade moves only %s",
					kd.Namespace, kd.Name, g, h, HostClusterHost)
			}
			if _, ok := inv.hostVars[h]; !ok {
				return nil, fmt.Errorf("building inventory for KarmadaDeployment %s/%s: upgrade group %s names %q, which is not in spec.hosts", kd.Namespace, kd.Name, g, h)
			}
			inv.add(g, h)
		}
	}

	joined := map[string]kaov1.MemberStatus{}
	// reached are the members kao gave Karmada access to: joined, or
	// handed an agent certificate (a Pull agent may not have registered).
	reached := map[string]bool{}
	for _, m := range kd.Status.Members {
		if m.Joined {
			joined[m.Name] = m
		}
		reached[m.Name] = m.Joined || m.AgentCertificateNotAfter != nil
	}
	inSpec := map[string]bool{}
	for _, m := range kd.Spec.Members {
		inSpec[m.Name] = true
		host := MemberHost(m.Name)
		inv.hostVars[host] = specMemberVars(m, opts)
		if reached[m.Name] {
			// The uninstall revokes Karmada's access in it.
			inv.hostVars[host]["kao_member_revoke"] = true
		}
		inv.add(GroupMembers, host)
		st, isJoined := joined[m.Name]
		if !isJoined || m.SyncMode == kaov1.PullSyncMode && !agentCertificateDelivered(kd, st, opts) {
			inv.add(GroupMembersJoin, host)
		}
	}
	for _, m := range kd.Status.Members {
		if !m.Joined || inSpec[m.Name] {
			continue
		}
		host := MemberHost(m.Name)
		inv.hostVars[host] = statusMemberVars(m, opts)
		inv.hostVars[host]["kao_member_revoke"] = true
		inv.add(GroupMembersUnjoin, host)
	}

	grouped := map[string]bool{}
	for _, hosts := range inv.groups {
		for _, h := range hosts {
			grouped[h] = true
		}
	}
	ungrouped := []string{}
	for h := range inv.hostVars {
		if !grouped[h] {
			ungrouped = append(ungrouped, h)
		}
	}
	inv.groups[GroupUngrouped] = ungrouped
	for _, hosts := range inv.groups {
		sort.Strings(hosts)
	}
	return inv, nil
}

// agentCertificateDelivered tells whether the joined Pull member m already
// has its current karmada-agent certificate: the one status.members records
// as delivered expires when the current one does.
func agentCertificateDelivered(kd *kaov1.KarmadaDeployment, m kaov1.MemberStatus, opts Options) bool {
	current, ok := time.Time{}, false
	if opts.AgentCertificateNotAfter != nil {
		current, ok = opts.AgentCertificateNotAfter(m.Name)
	} else {
		for _, c := range kd.Status.Certificates {
			if c.Name == pki.AgentClient(m.Name) {
				current, ok = c.NotAfter.Time, true
			}
		}
	}
	return ok && m.AgentCertificateNotAfter != nil && m.AgentCertificateNotAfter.Time.Equal(current)
}

// sortedKeys returns the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// add puts host into group once.
func (inv *Inventory) add(group, host string) {
	if !slices.Contains(inv.groups[group], host) {
		inv.groups[group] = append(inv.groups[group], host)
	}
}

// Hosts returns the sorted host names of group; for "all", every host. It returns
// nil for a group the inventory does not have.
func (inv *Inventory) Hosts(group string) []string {
	if group == GroupAll {
		all := make([]string, 0, len(inv.hostVars))
		for h := range inv.hostVars {
			all = append(all, h)
		}
		sort.Strings(all)
		return all
	}
	hosts, ok := inv.groups[group]
	if !ok {
		return nil
	}
	return slices.Clone(hosts)
}

// groupNames returns every group but all, sorted.
func (inv *Inventory) groupNames() []string {
	names := make([]string, 0, len(inv.groups))
	for g := range inv.groups {
		names = append(names, g)
	}
	sort.Strings(names)
	return names
}

// ScriptJSON renders the inventory as an inventory script's `--list` output: one key
// per group ({"hosts": [...]}; all also has "children" and "vars") and
// _meta.hostvars, so Ansible never calls `--host`.
func (inv *Inventory) ScriptJSON() ([]byte, error) {
	out := map[string]any{
		"_meta": map[string]any{"hostvars": inv.hostVars},
		GroupAll: map[string]any{
			"children": inv.groupNames(),
			"vars":     inv.allVars,
		},
	}
	for g, hosts := range inv.groups {
		// "hosts" must be present even when empty: a group object without hosts,
		// vars or children is read by Ansible as a host of the same name.
		out[g] = map[string]any{"hosts": hosts}
	}
	return encode(out, true)
}

// HostJSON renders the variables of one host, the output of `--host NAME`.
// The group variables of all are not included, as the protocol wants.
func (inv *Inventory) HostJSON(host string) ([]byte, error) {
	hv, ok := inv.hostVars[host]
	if !ok {
		return nil, fmt.Errorf("host %q is not in the inventory; the hosts are %v", host, inv.Hosts(GroupAll))
	}
	return encode(hv, true)
}

// FileJSON renders the inventory in the layout of Ansible's YAML inventory plugin,
// as JSON: write it to a file named hosts.json and pass it with -i. Host variables
// sit once under all.hosts; each group lists its hosts with no variables.
func (inv *Inventory) FileJSON() ([]byte, error) {
	children := map[string]any{}
	for g, hosts := range inv.groups {
		members := map[string]any{}
		for _, h := range hosts {
			members[h] = map[string]any{}
		}
		children[g] = map[string]any{"hosts": members}
	}
	out := map[string]any{
		GroupAll: map[string]any{
			"vars":     inv.allVars,
			"hosts":    inv.hostVars,
			"children": children,
		},
	}
	return encode(out, true)
}

// encode marshals v without HTML escaping (so Jinja's `<` and `&` stay readable),
// indented when indent is set, with a trailing newline then.
func encode(v any, indent bool) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encoding inventory JSON: %w", err)
	}
	if !indent {
		return bytes.TrimRight(buf.Bytes(), "\n"), nil
	}
	return buf.Bytes(), nil
}
