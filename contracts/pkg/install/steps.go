package install

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Names of Ichor's own objects in its namespace, as kustomize/base names them.
const (
	// ControllerName names the controller's Deployment, PodDisruptionBudget and ServiceAccount.
	ControllerName = "ichor-controller"
	// UIName names ichor-ui's Deployment, PodDisruptionBudget, Service and ServiceAccount.
	UIName = "ichor-ui"
	// InstallerName names the installer's ServiceAccount, ClusterRole, Role and their bindings.
	InstallerName = "ichor-installer"
	// WebhookServiceName is the Service the API server calls the admission webhooks through.
	WebhookServiceName = "ichor-webhook"
	// FieldManager is the installer's field manager for server-side apply.
	FieldManager = "ichor-installer"
	// InstallerRepository is the repository of the installer image.
	InstallerRepository = "ghcr.io/maeshinshin/ichor-installer"
)

// CreateOnlyAnnotation on an object of the manifest (value "true") makes the
// installer create it when it is missing and otherwise leave it as it is: its
// content is the controller's to keep (the ClusterRole of the users ichor-ui
// may impersonate), and applying the manifest's placeholder again would take
// the users' rights away until the controller writes them back.
const CreateOnlyAnnotation = "ichor.maesh.dev/install-create-only"

// Kinds the steps tell apart.
const (
	kindNamespace = "Namespace"
	kindCRD       = "CustomResourceDefinition"
)

// Step is the installer step an object of the manifest belongs to.
type Step int

// The installer's steps, in the order it applies them.
const (
	// StepInstallerRBAC is the Namespace and the installer's own RBAC, applied first.
	StepInstallerRBAC Step = iota
	// StepCRDs is the CustomResourceDefinitions.
	StepCRDs
	// StepController is the controller and everything else that is not ichor-ui's.
	StepController
	// StepUI is ichor-ui's objects.
	StepUI
)

func (s Step) String() string {
	switch s {
	case StepInstallerRBAC:
		return "installer RBAC"
	case StepCRDs:
		return "CRDs"
	case StepController:
		return "controller"
	case StepUI:
		return "ichor-ui"
	}

	return "unknown"
}

// StepOf is the step that applies o.
func StepOf(o *unstructured.Unstructured) Step {
	name := o.GetName()

	switch o.GetKind() {
	case kindNamespace:
		return StepInstallerRBAC
	case kindCRD:
		return StepCRDs
	case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		if name == InstallerName {
			return StepInstallerRBAC
		}
	}

	if name == UIName || strings.HasPrefix(name, UIName+"-") || o.GetLabels()["app.kubernetes.io/name"] == UIName {
		return StepUI
	}

	return StepController
}

// ByStep returns the objects of step s, in the manifest's order.
func ByStep(objs []*unstructured.Unstructured, s Step) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured

	for _, o := range objs {
		if StepOf(o) == s {
			out = append(out, o)
		}
	}

	return out
}

// InstallerImage is the installer image of an Ichor version: its release tag
// (build metadata dropped: a tag cannot carry '+'), or latest for a
// development build, whose manifest names the controller and ichor-ui by
// latest too.
func InstallerImage(version string) string {
	return InstallerRepository + ":" + ImageTag(version)
}

// ReleaseVersion drops semver build metadata (v0.0.0-dev+abc1234 →
// v0.0.0-dev): an IchorInstallation's versions name a release, and build
// metadata does not take part in version precedence.
func ReleaseVersion(v string) string {
	if i := strings.IndexByte(v, '+'); i >= 0 {
		return v[:i]
	}

	return v
}

// ImageTag is the image tag of an Ichor version (see InstallerImage).
func ImageTag(version string) string {
	version = ReleaseVersion(version)

	if version == "" || strings.HasPrefix(version, "v0.0.0-dev") {
		return "latest"
	}

	return version
}
