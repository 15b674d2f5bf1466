package config

// KindInfo names one mirrored Talos document kind.
//
// +kubebuilder:object:generate=false
type KindInfo struct {
	// Kind is the document kind as Talos registers it (the legacy document's is v1alpha1).
	Kind string
	// Type is the name of the mirror type in this package.
	Type string
}

// ArgValue is the value of one extra argument of a Kubernetes component:
// a single string, or a list of strings when the flag is repeated.
// At most one of value and values is set.
//
// +kubebuilder:validation:MaxProperties=1
type ArgValue struct {
	// value is the argument's single value.
	// +optional
	Value string `json:"value,omitempty"`
	// values are the argument's values; the flag is passed once per value.
	// +optional
	// +listType=atomic
	Values []string `json:"values,omitempty"`
}
