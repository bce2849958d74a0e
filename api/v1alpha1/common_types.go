package v1alpha1

// SecretKeyReference points at one key of a Secret in the namespace of the
// object that holds the reference. kao never accepts secret material inline.
type SecretKeyReference struct {
	// name is the name of the Secret, in the same namespace as the referring object.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// key is the key inside the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// Arg is one command-line flag for a component, rendered as --name=value.
type Arg struct {
	// name is the flag name without leading dashes, for example "v" or "audit-log-path".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9-]*$`
	Name string `json:"name"`

	// value is the flag value. It is passed to the component as one argument, never through
	// a shell. It must not contain control characters such as newlines or NUL.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="!self.matches('[\\\\x00-\\\\x1f\\\\x7f]')",message="an extra arg value must not contain control characters such as newlines or NUL"
	Value string `json:"value,omitempty"`
}

// FeatureGate switches one feature gate of a component on or off.
type FeatureGate struct {
	// name is the feature gate name, for example "PropagateDeps".
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9]*$`
	Name string `json:"name"`

	// enabled sets the gate on (true) or off (false).
	// +required
	Enabled bool `json:"enabled"`
}

// Annotations a user sets on a KarmadaDeployment that its inventory carries.
const (
	// TakeOverFromAnnotation names, by UID, a KarmadaDeployment that is gone
	// whose hosts, etcd data directories and etcd claims this deployment may
	// take over. Without it kao refuses anything another deployment left
	// behind (for example after a deletion with kao.io/skip-uninstall).
	TakeOverFromAnnotation = "kao.io/take-over-from"
	// MembersGoneAnnotation set to "true" on a KarmadaDeployment being
	// deleted says its member clusters are gone: the uninstall then revokes
	// Karmada's access in none of them.
	MembersGoneAnnotation = "kao.io/members-gone"
)
