// Package v1alpha1 holds Ichor's custom resource types, API group
// ichor.maesh.dev, version v1alpha1.
//
// The package imports only the standard library and k8s.io/apimachinery and
// k8s.io/api, so every deliverable and users' own tools can import it without
// pulling in a controller framework. Machine configuration is never stored
// here: the types hold the ingredients (versions, patches, per-node values)
// and the controller renders on every reconcile. Secrets are referenced by
// name, never embedded.
//
// +kubebuilder:object:generate=true
// +groupName=ichor.maesh.dev
package v1alpha1
