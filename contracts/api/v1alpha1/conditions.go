package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ConditionHealthyStatus is the status of each condition type when all is
// well. A condition in the other status is a problem (shown first, by the
// console and the CLI); types not listed (SecureBoot, KernelLockdown,
// CNIHandover, StoreInCluster, LockAcquired) only inform. The console gets
// this table through tools/cmd/apiconstgen.
var ConditionHealthyStatus = map[string]metav1.ConditionStatus{
	ReadyCondition:                    metav1.ConditionTrue,
	ReconcilingCondition:              metav1.ConditionFalse,
	StalledCondition:                  metav1.ConditionFalse,
	PausedCondition:                   metav1.ConditionFalse,
	CNIUnsupportedCondition:           metav1.ConditionFalse,
	CARotationAdvisedCondition:        metav1.ConditionFalse,
	NetworkPoliciesAppliedCondition:   metav1.ConditionTrue,
	TopologyTransitioningCondition:    metav1.ConditionFalse,
	VersionsCompatibleCondition:       metav1.ConditionTrue,
	ValidCondition:                    metav1.ConditionTrue,
	IssuedCondition:                   metav1.ConditionTrue,
	DeniedCondition:                   metav1.ConditionFalse,
	StaleCondition:                    metav1.ConditionFalse,
	ApprovedCondition:                 metav1.ConditionTrue,
	ProvisionedCondition:              metav1.ConditionTrue,
	DriftedCondition:                  metav1.ConditionFalse,
	RebootRequiredCondition:           metav1.ConditionFalse,
	APIServerRestartRequiredCondition: metav1.ConditionFalse,
	AdoptionHeldCondition:             metav1.ConditionFalse,
	FingerprintTrustedCondition:       metav1.ConditionTrue,
	IdentityConflictCondition:         metav1.ConditionFalse,
	DiskRolesEffectiveCondition:       metav1.ConditionTrue,
	InSyncCondition:                   metav1.ConditionTrue,
	NodeHealthyCondition:              metav1.ConditionTrue,
	DeletingCondition:                 metav1.ConditionFalse,
	PreChecksPassedCondition:          metav1.ConditionTrue,
	ExtensionsPresentCondition:        metav1.ConditionTrue,
	StorageConsistentCondition:        metav1.ConditionTrue,
	NodesPreparedCondition:            metav1.ConditionTrue,
	KubeProxyConsistentCondition:      metav1.ConditionTrue,
	CertificatesExpiringCondition:     metav1.ConditionFalse,
}

// ConditionAbnormal reports whether c is in the status that is not its
// type's healthy one; an unknown status of a listed type is abnormal too.
func ConditionAbnormal(c metav1.Condition) bool {
	healthy, ok := ConditionHealthyStatus[c.Type]

	return ok && c.Status != healthy
}
