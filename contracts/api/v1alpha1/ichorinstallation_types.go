package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IchorInstallationName is the name of the one IchorInstallation.
const IchorInstallationName = "ichor"

// Condition types of the IchorInstallation.
const (
	// InstalledCondition says how the installer's last run ended: True when
	// status.installedVersion runs as that run installed it; False when it
	// failed (reason Refused: nothing was changed; RolledBack: the previous
	// version runs again; RollbackFailed: look at ichor-system now); Unknown
	// while a run is under way (reason Installing). The installer Job writes it.
	InstalledCondition = "Installed"
	// HighlyAvailableCondition says whether the controller and ichor-ui run
	// with two replicas, a PodDisruptionBudget and anti-affinity (True), or
	// with one replica and no PodDisruptionBudget because the cluster has a
	// single schedulable node (False); it only informs. The controller writes it.
	HighlyAvailableCondition = "HighlyAvailable"
)

// Reasons of the IchorInstallation's conditions.
const (
	// InstallSucceededReason is Installed=True's reason.
	InstallSucceededReason = "InstallSucceeded"
	// InstallInProgressReason means an installer run is under way.
	InstallInProgressReason = "InstallInProgress"
	// RolledBackReason means a step failed and the previous manifests were
	// applied again and are available.
	RolledBackReason = "RolledBack"
	// RollbackFailedReason means a step failed and the previous manifests did
	// not become available again either.
	RollbackFailedReason = "RollbackFailed"
	// MultipleNodesReason means two or more nodes can run Ichor's pods: two replicas and a PodDisruptionBudget.
	MultipleNodesReason = "MultipleNodes"
	// SingleNodeReason means one node (or none) can run Ichor's pods: one replica and no PodDisruptionBudget.
	SingleNodeReason = "SingleNode"
	// NotDeployedReason means Ichor does not run as Deployments in its namespace (a controller running elsewhere).
	NotDeployedReason = "NotDeployed"
	// ManagedByHelmReason means Helm owns Ichor's Deployments, so their replicas follow the chart's values.
	ManagedByHelmReason = "ManagedByHelm"
)

// Deployment managers.
const (
	// ManagerIchor means `ichor upgrade ichor` (the installer Job) upgrades Ichor.
	ManagerIchor = "ichor"
	// ManagerHelm means Helm owns upgrades; `ichor upgrade ichor` refuses.
	ManagerHelm = "helm"
)

// IchorInstallationSpec is Ichor's own version and runtime settings. Writing
// spec.version needs `update` on `ichorinstallations/version`, writing
// spec.settings needs `update` on `ichorinstallations/settings`.
type IchorInstallationSpec struct {
	// version is the Ichor release to run.
	// +required
	Version IchorVersionSpec `json:"version"`
	// deployment is how Ichor is installed and upgraded.
	// +optional
	Deployment IchorDeploymentSpec `json:"deployment,omitempty"`
	// settings are runtime settings, read live by the controller, the webhooks and ichor-ui.
	// +optional
	Settings IchorSettings `json:"settings,omitempty"`
}

// IchorVersionSpec is the Ichor release to run.
type IchorVersionSpec struct {
	// version is the Ichor release, for example v0.3.0.
	// +required
	// +kubebuilder:validation:Pattern=`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`
	Version string `json:"version"`
	// installerRepository is the repository of the installer image. Empty means the release's own.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	InstallerRepository string `json:"installerRepository,omitempty"`
}

// IchorDeploymentSpec is how Ichor is installed.
type IchorDeploymentSpec struct {
	// manager is ichor (the installer Job upgrades Ichor) or helm (Helm owns upgrades).
	// +optional
	// +kubebuilder:validation:Enum=ichor;helm
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.deployment.manager is immutable: reinstall to change how Ichor is managed"
	Manager string `json:"manager,omitempty"`
}

// IchorSettings are Ichor's runtime settings; every field is optional.
type IchorSettings struct {
	// idTokenLifetime is the lifetime of the ID tokens ichor-ui issues. Empty means 5 minutes.
	// +optional
	IDTokenLifetime *metav1.Duration `json:"idTokenLifetime,omitempty"`
	// refreshTokenLifetime is the lifetime of refresh tokens. Empty means 12 hours.
	// +optional
	RefreshTokenLifetime *metav1.Duration `json:"refreshTokenLifetime,omitempty"`
	// defaultDriftPolicy is the drift policy of clusters that set none: Warn or AutoCorrect.
	// +optional
	// +kubebuilder:validation:Enum=Warn;AutoCorrect
	DefaultDriftPolicy string `json:"defaultDriftPolicy,omitempty"`
}

// IchorInstallationStatus is the observed state of the installation.
type IchorInstallationStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Installed (the installer's last run), HighlyAvailable (replicas and PodDisruptionBudgets).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// installedVersion is the Ichor release that runs.
	// +optional
	InstalledVersion string `json:"installedVersion,omitempty"`
	// failureReason is why the installer's last run failed, as its Job's log
	// says it; empty once a run succeeds.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	FailureReason string `json:"failureReason,omitempty"`
	// schedulableNodes is how many nodes can run Ichor's pods, as the
	// controller last counted them (cordoned nodes count: a cordon is a
	// drain's and is lifted again).
	// +optional
	SchedulableNodes int32 `json:"schedulableNodes,omitempty"`
	// replicas is the replica count of the controller and ichor-ui: 1 on a
	// cluster with one schedulable node (and no PodDisruptionBudget), else 2.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// operationName is the TalosOperation of type ichor upgrading Ichor, if any.
	// +optional
	OperationName string `json:"operationName,omitempty"`
	// issuer is where the kube-apiserver finds ichor-ui's issuer of Ichor's
	// users, as the controller publishes it; empty while Ichor's users are off.
	// +optional
	Issuer *IssuerStatus `json:"issuer,omitempty"`
}

// IssuerStatus is ichor-ui's OIDC issuer as the kube-apiserver reaches it.
type IssuerStatus struct {
	// url is the issuer: ichor-ui's URL, the `iss` of its tokens.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	URL string `json:"url,omitempty"`
	// discoveryURL is its discovery document on ichor-ui's ClusterIP, port 8444.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	DiscoveryURL string `json:"discoveryURL,omitempty"`
	// certificateAuthority is the PEM bundle that signs ichor-ui's certificate.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	CertificateAuthority string `json:"certificateAuthority,omitempty"`
}

// IchorInstallation is the singleton (named `ichor`) that holds Ichor's own
// version and runtime settings.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ii,categories=ichor
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version.version`
// +kubebuilder:printcolumn:name="Installed",type=string,JSONPath=`.status.installedVersion`
// +kubebuilder:printcolumn:name="Manager",type=string,JSONPath=`.spec.deployment.manager`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'ichor'",message="IchorInstallation is a singleton: its name must be ichor"
type IchorInstallation struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired version and settings.
	// +required
	Spec IchorInstallationSpec `json:"spec"`
	// status is the observed state.
	// +optional
	Status IchorInstallationStatus `json:"status,omitempty"`
}

// IchorInstallationList is a list of IchorInstallations.
//
// +kubebuilder:object:root=true
type IchorInstallationList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the installations.
	Items []IchorInstallation `json:"items"`
}
