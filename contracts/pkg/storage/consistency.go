package storage

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// LonghornSettingResource is where Longhorn keeps the setting that makes it honour the Node label and annotation
// Ichor's disk registration writes (render.LonghornCreateDefaultDiskLabel):
// settings.longhorn.io/v1beta2 create-default-disk-labeled-nodes in
// longhorn-system, whose top-level value is "true" or "false"
// (longhorn-manager k8s/pkg/apis/longhorn/v1beta2/setting.go, Setting.Value;
// types/setting.go, SettingNameCreateDefaultDiskLabeledNodes, default false;
// controller/node_controller.go, syncDefaultDisk reads the label only when it
// is true). The chart sets it from defaultSettings.createDefaultDiskLabeledNodes.
var LonghornSettingResource = schema.GroupVersionResource{Group: "longhorn.io", Version: "v1beta2", Resource: "settings"}

// Names of the Longhorn setting the consistency check reads.
const (
	LonghornNamespace                  = "longhorn-system"
	LonghornCreateDefaultDiskSetting   = "create-default-disk-labeled-nodes"
	LonghornCreateDefaultDiskHelmValue = "defaultSettings.createDefaultDiskLabeledNodes"
)

// Reasons of the StorageConsistent condition.
const (
	StorageConsistentReason     = "Consistent"
	NoRegistrationReason        = "NoRegistration"
	StorageNotInstalledReason   = "StorageSystemNotInstalled"
	RegistrationIgnoredReason   = "RegistrationIgnored"
	StorageUnreadableReason     = "StorageSystemUnreadable"
	setCreateDefaultDiskWayOut  = "set Longhorn's setting " + LonghornCreateDefaultDiskSetting + " to true (Helm value " + LonghornCreateDefaultDiskHelmValue + ": true, or kubectl -n " + LonghornNamespace + " patch settings.longhorn.io " + LonghornCreateDefaultDiskSetting + " --type merge -p '{\"value\":\"true\"}') before its nodes register, or set the TalosStorage's spec.diskRegistration to None and add the disks in Longhorn yourself"
	longhornReadsLabelOnlyOnce  = "Longhorn reads the label and annotation when it first sees a node with no disks"
	consistentMessage           = "Longhorn's setting " + LonghornCreateDefaultDiskSetting + " is true: it creates the disks Ichor registers on the Nodes"
	notInstalledMessage         = "Longhorn is not installed yet (no settings.longhorn.io in the cluster): when it is, its setting " + LonghornCreateDefaultDiskSetting + " must be true for the disks Ichor registers to be used; "
	noRegistrationMessageFormat = "the %s preset with diskRegistration %s registers no disks: nothing to check"
)

// LonghornSetting is what the check read: whether Longhorn's settings CRD is
// served, whether the setting object exists and its value.
type LonghornSetting struct {
	Served bool
	Found  bool
	Value  string
}

// ConsistencyReport is the StorageConsistent condition.
type ConsistencyReport struct {
	Status  metav1.ConditionStatus
	Reason  string
	Message string
}

// CheckConsistency decides StorageConsistent (architecture "Storage": "A
// consistency check confirms the storage system is configured to honour
// that"). registers says whether the TalosStorage registers disks through
// the Node (render.RegistersDisks); without registration there is nothing to
// check. Before Longhorn is installed the answer is Unknown with what to
// set; a setting that is missing (Longhorn's default, false) or not "true"
// is False with the way out.
func CheckConsistency(preset, registration string, registers bool, got LonghornSetting) ConsistencyReport {
	if !registers {
		if registration == "" {
			registration = "NodeLabels"
		}

		return ConsistencyReport{Status: metav1.ConditionTrue, Reason: NoRegistrationReason, Message: fmt.Sprintf(noRegistrationMessageFormat, preset, registration)}
	}

	switch {
	case !got.Served:
		return ConsistencyReport{Status: metav1.ConditionUnknown, Reason: StorageNotInstalledReason, Message: notInstalledMessage + setCreateDefaultDiskWayOut}
	case got.Found && strings.EqualFold(strings.TrimSpace(got.Value), "true"):
		return ConsistencyReport{Status: metav1.ConditionTrue, Reason: StorageConsistentReason, Message: consistentMessage}
	}

	value := "missing (Longhorn's default, false)"
	if got.Found {
		value = fmt.Sprintf("%q", got.Value)
	}

	return ConsistencyReport{
		Status: metav1.ConditionFalse, Reason: RegistrationIgnoredReason,
		Message: fmt.Sprintf("Longhorn ignores the disks Ichor registers on the Nodes: its setting %s is %s, so it creates its default disk under its default data path instead (%s); %s",
			LonghornCreateDefaultDiskSetting, value, longhornReadsLabelOnlyOnce, setCreateDefaultDiskWayOut),
	}
}
