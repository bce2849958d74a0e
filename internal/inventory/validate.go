package inventory

import (
	"fmt"
	"net/netip"
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation/field"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

// The patterns below repeat the API's own markers on purpose: Build must not trust
// that an object went through the API server (it may come from a file), and these
// fields become inventory host names or connection variables.
var (
	// dnsLabel is a DNS-1123 label, the pattern of spec.hosts[].name and spec.members[].name.
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// dnsName is a lower-case DNS name, the non-IP form of spec.hosts[].address.
	dnsName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// objectUID is the form of a Kubernetes object UID.
	objectUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	// sshUser is the pattern of spec.hosts[].user.
	sshUser = regexp.MustCompile(`^[a-z_][a-z0-9_-]*$`)
)

// Length limits, the same as the API's.
const (
	maxHostNameLen   = 63
	maxMemberNameLen = 48
	maxAddressLen    = 253
	maxUserLen       = 32
)

// reservedHostNames are group names a host must not take: Ansible would warn about
// the clash and a pattern such as `--limit etcd` would stop meaning one thing.
// Other group names hold an underscore, which a DNS-1123 label cannot.
var reservedHostNames = map[string]bool{
	GroupAll:       true,
	GroupUngrouped: true,
	GroupEtcd:      true,
	GroupMembers:   true,
}

// validate checks every field that Build turns into a host name, a group or a
// connection variable. Free-text fields are not checked here: they are emitted as
// unsafe strings and cannot change the inventory's shape.
func validate(kd *kaov1.KarmadaDeployment) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")

	if uid, ok := kd.Annotations[kaov1.TakeOverFromAnnotation]; ok && !objectUID.MatchString(uid) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "annotations").Key(kaov1.TakeOverFromAnnotation), uid,
			"must be the UID of a KarmadaDeployment (kubectl get kd NAME -o jsonpath='{.metadata.uid}')"))
	}

	mode := kd.Spec.Mode
	switch mode {
	case kaov1.BinaryMode, kaov1.ContainerizedMode:
	default:
		errs = append(errs, field.NotSupported(spec.Child("mode"), mode,
			[]kaov1.DeploymentMode{kaov1.BinaryMode, kaov1.ContainerizedMode}))
	}

	if mode == kaov1.ContainerizedMode && len(kd.Spec.Hosts) > 0 {
		errs = append(errs, field.Forbidden(spec.Child("hosts"), "spec.hosts is only used when spec.mode is Binary"))
	}
	errs = append(errs, validateHosts(spec.Child("hosts"), kd.Spec.Hosts)...)

	if kd.Spec.SSH != nil {
		switch kd.Spec.SSH.Become {
		case "", kaov1.BecomeNone, kaov1.BecomeSudo:
		default:
			errs = append(errs, field.NotSupported(spec.Child("ssh", "become"), kd.Spec.SSH.Become,
				[]kaov1.BecomeMethod{kaov1.BecomeNone, kaov1.BecomeSudo}))
		}
	}

	if p := kd.Spec.APIServer.SecurePort; p != 0 && (p < 1 || p > 65535) {
		errs = append(errs, field.Invalid(spec.Child("apiServer", "securePort"), p, "must be between 1 and 65535"))
	}

	etcd := kd.Spec.Etcd
	if (etcd.Managed == nil) == (etcd.External == nil) {
		errs = append(errs, field.Invalid(spec.Child("etcd"), "", "set exactly one of spec.etcd.managed and spec.etcd.external"))
	}

	errs = append(errs, validateMembers(spec.Child("members"), kd.Spec.Members)...)

	// Status entries become hosts of members_unjoin, so their names are checked like spec's.
	statusMembers := field.NewPath("status", "members")
	for i, m := range kd.Status.Members {
		errs = append(errs, validateMemberName(statusMembers.Index(i).Child("name"), m.Name)...)
	}
	return errs
}

// validateHosts checks the SSH hosts: names, addresses, ports, users and roles.
func validateHosts(path *field.Path, hosts []kaov1.Host) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, h := range hosts {
		p := path.Index(i)
		switch {
		case h.Name == "":
			errs = append(errs, field.Required(p.Child("name"), "every host needs a name"))
		case len(h.Name) > maxHostNameLen || !dnsLabel.MatchString(h.Name):
			errs = append(errs, field.Invalid(p.Child("name"), h.Name, "must be a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters"))
		case reservedHostNames[h.Name]:
			errs = append(errs, field.Invalid(p.Child("name"), h.Name, "is also the name of an inventory group; choose another host name"))
		case seen[h.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), h.Name))
		}
		seen[h.Name] = true

		if msg := checkAddress(h.Address); msg != "" {
			errs = append(errs, field.Invalid(p.Child("address"), h.Address, msg))
		}
		if h.Port != 0 && (h.Port < 1 || h.Port > 65535) {
			errs = append(errs, field.Invalid(p.Child("port"), h.Port, "must be between 1 and 65535 (0 or unset means 22)"))
		}
		if h.User != "" && (len(h.User) > maxUserLen || !sshUser.MatchString(h.User)) {
			errs = append(errs, field.Invalid(p.Child("user"), h.User, "must match ^[a-z_][a-z0-9_-]*$ and be at most 32 characters"))
		}
		// A host without roles is leaving: it stays in the inventory
		// (ungrouped) so that the run can retire what kao ran there.
		for j, r := range h.Roles {
			switch r {
			case kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole:
			default:
				errs = append(errs, field.NotSupported(p.Child("roles").Index(j), r,
					[]kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}))
			}
		}
	}
	return errs
}

// checkAddress returns why an SSH address is not acceptable, or "" when it is:
// an IP address without a zone, or a lower-case DNS name.
func checkAddress(addr string) string {
	if addr == "" {
		return "must be an IP address or a lower-case DNS name, not empty"
	}
	if ip, err := netip.ParseAddr(addr); err == nil {
		if ip.Zone() != "" {
			return "must not carry an IPv6 zone"
		}
		return ""
	}
	if len(addr) > maxAddressLen || !dnsName.MatchString(addr) {
		return "must be an IP address or a lower-case DNS name"
	}
	return ""
}

// validateMembers checks spec.members: names and sync modes.
func validateMembers(path *field.Path, members []kaov1.MemberSpec) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, m := range members {
		p := path.Index(i)
		errs = append(errs, validateMemberName(p.Child("name"), m.Name)...)
		if seen[m.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), m.Name))
		}
		seen[m.Name] = true
		switch m.SyncMode {
		case kaov1.PushSyncMode, kaov1.PullSyncMode:
		default:
			errs = append(errs, field.NotSupported(p.Child("syncMode"), m.SyncMode,
				[]kaov1.SyncMode{kaov1.PushSyncMode, kaov1.PullSyncMode}))
		}
	}
	return errs
}

// validateMemberName checks a member name, which becomes the host name member_<name>.
func validateMemberName(path *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "every member needs a name")}
	}
	if len(name) > maxMemberNameLen || !dnsLabel.MatchString(name) {
		return field.ErrorList{field.Invalid(path, name,
			fmt.Sprintf("must be a DNS-1123 label: lower-case letters, digits and '-', at most %d characters", maxMemberNameLen))}
	}
	return nil
}
