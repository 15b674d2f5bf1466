package storage_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/storage"
)

// TestStorageConsistent: registration through the Node is consistent only
// when Longhorn's create-default-disk-labeled-nodes is "true"; before Longhorn
// is installed the answer is Unknown with what to set; no registration, nothing to check.
func TestStorageConsistent(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name      string
		registers bool
		got       storage.LonghornSetting
		status    metav1.ConditionStatus
		reason    string
		mentions  []string
	}{
		{"no registration", false, storage.LonghornSetting{}, metav1.ConditionTrue, storage.NoRegistrationReason, []string{"nothing to check"}},
		{"longhorn not installed", true, storage.LonghornSetting{}, metav1.ConditionUnknown, storage.StorageNotInstalledReason,
			[]string{"not installed", storage.LonghornCreateDefaultDiskHelmValue}},
		{"setting true", true, storage.LonghornSetting{Served: true, Found: true, Value: "true"}, metav1.ConditionTrue, storage.StorageConsistentReason, nil},
		{"setting false", true, storage.LonghornSetting{Served: true, Found: true, Value: "false"}, metav1.ConditionFalse, storage.RegistrationIgnoredReason,
			[]string{`"false"`, "kubectl -n longhorn-system patch", "diskRegistration to None"}},
		{"setting missing", true, storage.LonghornSetting{Served: true}, metav1.ConditionFalse, storage.RegistrationIgnoredReason, []string{"missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			rep := storage.CheckConsistency(ichorv1alpha1.StoragePresetLonghornV1, "", tc.registers, tc.got)
			if rep.Status != tc.status || rep.Reason != tc.reason {
				t.Fatalf("%s/%s, want %s/%s: %s", rep.Status, rep.Reason, tc.status, tc.reason, rep.Message)
			}

			for _, m := range tc.mentions {
				if !strings.Contains(rep.Message, m) {
					t.Errorf("message %q does not mention %q", rep.Message, m)
				}
			}
		})
	}
}
