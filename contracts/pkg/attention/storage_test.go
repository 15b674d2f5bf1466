package attention

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// TestStorageAttention: a registration the storage system ignores and
// missing extensions are warnings, machines not prepared yet work in
// progress; a healthy storage and another cluster's say nothing.
func TestStorageAttention(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	st := func(name, cluster string, conds ...metav1.Condition) ichorv1alpha1.TalosStorage {
		for i := range conds {
			conds[i].LastTransitionTime = at
		}

		return ichorv1alpha1.TalosStorage{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       ichorv1alpha1.TalosStorageSpec{ClusterName: cluster, Preset: ichorv1alpha1.StoragePresetLonghornV1},
			Status:     ichorv1alpha1.TalosStorageStatus{Conditions: conds},
		}
	}
	cond := func(typ string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: "R", Message: "m"}
	}

	storages := []ichorv1alpha1.TalosStorage{
		st("lh", "prod",
			cond(ichorv1alpha1.NodesPreparedCondition, metav1.ConditionFalse),
			cond(ichorv1alpha1.StorageConsistentCondition, metav1.ConditionFalse),
			cond(ichorv1alpha1.ExtensionsPresentCondition, metav1.ConditionTrue)),
		st("fine", "prod",
			cond(ichorv1alpha1.NodesPreparedCondition, metav1.ConditionTrue),
			cond(ichorv1alpha1.StorageConsistentCondition, metav1.ConditionUnknown)),
		st("other", "staging", cond(ichorv1alpha1.StorageConsistentCondition, metav1.ConditionFalse)),
	}

	got := WithStorages([]Item{{Key: "TalosMachine/w-1/x", Severity: Error}}, "prod", storages)

	want := []string{"TalosMachine/w-1/x", "TalosStorage/lh/StorageConsistent", "TalosStorage/lh/NodesPrepared"}
	if len(got) != len(want) {
		t.Fatalf("items %+v, want %v", got, want)
	}

	for i, k := range want {
		if got[i].Key != k {
			t.Errorf("item %d: %s, want %s", i, got[i].Key, k)
		}
	}

	if got[1].Severity != Warning || got[2].Severity != Info || got[1].Subject != "lh" || got[1].Command == "" {
		t.Errorf("items %+v", got[1:])
	}
}
