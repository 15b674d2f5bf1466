package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of every Ichor resource.
const Group = "ichor.maesh.dev"

// GroupVersion is the group and version of the types in this package.
var GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

var (
	// schemeBuilder registers the types of this package with a scheme.
	schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = schemeBuilder.AddToScheme
)

// Resource returns the GroupResource of resource in this API group.
func Resource(resource string) schema.GroupResource {
	return GroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&TalosCluster{}, &TalosClusterList{},
		&TalosMachine{}, &TalosMachineList{},
		&TalosConfigPatch{}, &TalosConfigPatchList{},
		&TalosStorage{}, &TalosStorageList{},
		&TalosEtcdBackup{}, &TalosEtcdBackupList{},
		&TalosOperation{}, &TalosOperationList{},
		&IchorInstallation{}, &IchorInstallationList{},
		&IchorUser{}, &IchorUserList{},
		&IchorUISession{}, &IchorUISessionList{},
		&MachineReclaim{}, &MachineReclaimList{},
		&TalosCredentialRequest{}, &TalosCredentialRequestList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
