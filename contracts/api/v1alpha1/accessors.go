package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Accessors the controller's reconcile skeleton (controller/internal/reconcile)
// uses on every kind: the conditions and observedGeneration of the status, and
// the TalosCluster an object belongs to (whose spec.paused stops the
// controllers acting on it).

// GetConditions returns the status conditions.
func (o *IchorInstallation) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *IchorInstallation) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *IchorInstallation) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *IchorInstallation) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetConditions returns the status conditions.
func (o *IchorUser) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *IchorUser) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *IchorUser) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *IchorUser) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetConditions returns the status conditions.
func (o *MachineReclaim) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *MachineReclaim) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *MachineReclaim) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *MachineReclaim) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetConditions returns the status conditions.
func (o *TalosCluster) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *TalosCluster) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *TalosCluster) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *TalosCluster) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetClusterName returns the cluster's own name.
func (o *TalosCluster) GetClusterName() string { return o.Name }

// GetConditions returns the status conditions.
func (o *TalosConfigPatch) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *TalosConfigPatch) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *TalosConfigPatch) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *TalosConfigPatch) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetClusterName returns the name of the TalosCluster the object belongs to
// (empty when it names none).
func (o *TalosConfigPatch) GetClusterName() string { return o.Spec.ClusterName }

// GetConditions returns the status conditions.
func (o *TalosCredentialRequest) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *TalosCredentialRequest) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *TalosCredentialRequest) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *TalosCredentialRequest) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetClusterName returns the name of the TalosCluster the object belongs to
// (empty when it names none).
func (o *TalosCredentialRequest) GetClusterName() string { return o.Spec.ClusterName }

// GetConditions returns the status conditions.
func (o *TalosEtcdBackup) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *TalosEtcdBackup) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *TalosEtcdBackup) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *TalosEtcdBackup) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetClusterName returns the name of the TalosCluster the object belongs to
// (empty when it names none).
func (o *TalosEtcdBackup) GetClusterName() string { return o.Spec.ClusterName }

// GetConditions returns the status conditions.
func (o *TalosMachine) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *TalosMachine) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *TalosMachine) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *TalosMachine) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetClusterName returns the name of the TalosCluster the object belongs to
// (empty when it names none).
func (o *TalosMachine) GetClusterName() string { return o.Spec.ClusterName }

// GetConditions returns the status conditions.
func (o *TalosOperation) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *TalosOperation) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *TalosOperation) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *TalosOperation) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetClusterName returns the name of the TalosCluster the object belongs to
// (empty when it names none).
func (o *TalosOperation) GetClusterName() string { return o.Spec.ClusterName }

// GetConditions returns the status conditions.
func (o *TalosStorage) GetConditions() []metav1.Condition { return o.Status.Conditions }

// SetConditions replaces the status conditions.
func (o *TalosStorage) SetConditions(c []metav1.Condition) { o.Status.Conditions = c }

// GetObservedGeneration returns status.observedGeneration.
func (o *TalosStorage) GetObservedGeneration() int64 { return o.Status.ObservedGeneration }

// SetObservedGeneration sets status.observedGeneration.
func (o *TalosStorage) SetObservedGeneration(g int64) { o.Status.ObservedGeneration = g }

// GetClusterName returns the name of the TalosCluster the object belongs to
// (empty when it names none).
func (o *TalosStorage) GetClusterName() string { return o.Spec.ClusterName }
