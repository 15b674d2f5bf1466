package storage_test

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/storage"
)

func TestCheckExtensions(t *testing.T) {
	both := map[string]string{"extensions.talos.dev/iscsi-tools": "v0.2.0", "extensions.talos.dev/util-linux-tools": "2.41.1"}
	iscsi := map[string]string{"extensions.talos.dev/iscsi-tools": "v0.2.0", "extensions.talos.dev/schematic-x": "y"}

	for _, tc := range []struct {
		name    string
		preset  string
		nodes   []storage.NodeExtensions
		status  metav1.ConditionStatus
		reason  string
		missing []string
		message []string
	}{
		{"every node has both", ichorv1alpha1.StoragePresetLonghornV1,
			[]storage.NodeExtensions{{Machine: "w-1", Found: true, Labels: both}, {Machine: "w-2", Found: true, Labels: both}},
			metav1.ConditionTrue, storage.ExtensionsPresentReason, nil, []string{"every selected node (2) has iscsi-tools, util-linux-tools"}},
		{"one lacks one", ichorv1alpha1.StoragePresetLonghornV1,
			[]storage.NodeExtensions{{Machine: "w-1", Found: true, Labels: both}, {Machine: "w-2", Found: true, Labels: iscsi}},
			metav1.ConditionFalse, storage.ExtensionsMissingReason, []string{"util-linux-tools"}, []string{"w-2 lacks util-linux-tools", "schematic"}},
		{"v2 needs them too", ichorv1alpha1.StoragePresetLonghornV2,
			[]storage.NodeExtensions{{Machine: "w-1", Found: true}},
			metav1.ConditionFalse, storage.ExtensionsMissingReason, []string{"iscsi-tools", "util-linux-tools"}, []string{"w-1 lacks iscsi-tools, util-linux-tools"}},
		{"a missing Node is unknown", ichorv1alpha1.StoragePresetLonghornV1,
			[]storage.NodeExtensions{{Machine: "w-1", Found: true, Labels: both}, {Machine: "w-3"}},
			metav1.ConditionUnknown, storage.NodesNotFoundReason, nil, []string{"no Kubernetes Node yet for w-3"}},
		{"lacking wins over not found", ichorv1alpha1.StoragePresetLonghornV1,
			[]storage.NodeExtensions{{Machine: "w-1", Found: true}, {Machine: "w-3"}},
			metav1.ConditionFalse, storage.ExtensionsMissingReason, []string{"iscsi-tools", "util-linux-tools"}, nil},
		{"raw needs none", ichorv1alpha1.StoragePresetRaw, []storage.NodeExtensions{{Machine: "w-1", Found: true}},
			metav1.ConditionTrue, storage.NoExtensionsNeededReason, nil, []string{"raw preset needs no system extension"}},
		{"filesystem needs none", ichorv1alpha1.StoragePresetFilesystem, nil, metav1.ConditionTrue, storage.NoExtensionsNeededReason, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := storage.CheckExtensions(tc.preset, tc.nodes)
			if got.Status != tc.status || got.Reason != tc.reason || !slices.Equal(got.Missing, tc.missing) {
				t.Errorf("got %+v, want %s %s missing %v", got, tc.status, tc.reason, tc.missing)
			}

			for _, m := range tc.message {
				if !strings.Contains(got.Message, m) {
					t.Errorf("message %q does not say %q", got.Message, m)
				}
			}
		})
	}
}
