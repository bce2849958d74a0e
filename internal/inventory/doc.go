// Package inventory turns a KarmadaDeployment into kao's Ansible inventory.
//
// One inventory serves the operator's runs and an ops team's own playbooks. It is
// emitted two ways with the same content: as the output of an inventory script
// (`--list`, `--host NAME`; see cmd/kao-inventory) and as a static hosts.json
// file in the layout of Ansible's YAML inventory plugin.
//
// Groups, always present (possibly empty), next to `all` and `ungrouped`:
//
//	etcd                   hosts with the etcd role (only when spec.etcd.managed is set)
//	karmada_apiserver      hosts with the apiServer role
//	karmada_control_plane  hosts with the controlPlane role
//	host_cluster           Containerized mode: the single host "host_cluster", local connection
//	members                every spec.members entry, as host "member_<name>", local connection
//	members_join           members in spec.members that status.members does not record as joined,
//	                       and joined Pull members whose current karmada-agent certificate (from
//	                       status.certificates) is not the one status.members records as delivered
//	members_unjoin         members joined in status.members that spec.members no longer lists
//
// Safety rules, from the design of record (DESIGN.md §5):
//
//   - Every string that comes from the CR is emitted as {"__ansible_unsafe": "..."},
//     one wrapper per string leaf (never on a list or a dict), so Ansible never
//     evaluates Jinja that a CR author wrote. Numbers and booleans stay plain.
//   - Variable names and dict keys are fixed names in this package; nothing from a
//     CR ever becomes a variable name.
//   - Connection variables (ansible_host, ansible_port, ansible_user) come only from
//     fields that Build validates itself, whatever the API server checked before.
//   - Output is sorted, so the same CR always yields the same bytes.
package inventory
