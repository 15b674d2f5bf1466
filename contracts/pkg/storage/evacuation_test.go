package storage_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/maeshinshin/ichor/contracts/pkg/storage"
)

func TestEvacuationStatus(t *testing.T) {
	t0 := time.Date(2026, 8, 1, 10, 0, 0, 0, time.UTC)
	replicas := []storage.Replica{
		{Name: "pvc-a-r-2", Volume: "pvc-a", Node: "w-1", Disk: "disk-1"},
		{Name: "pvc-a-r-1", Volume: "pvc-a", Node: "w-2", Disk: "disk-1"},
		{Name: "pvc-b-r-1", Volume: "pvc-b", Node: "w-1", Disk: "disk-2"},
		{Name: "pvc-b-r-2", Volume: "pvc-b", Node: "w-3", Disk: "disk-2"},
	}

	tests := []struct {
		name      string
		target    storage.Target
		replicas  []storage.Replica
		elapsed   time.Duration
		timeout   time.Duration
		want      storage.Phase
		remaining []string
		message   []string
	}{
		{"no replica at all", storage.Target{Node: "w-1"}, nil, time.Minute, time.Hour, storage.EvacuationDone, nil, []string{"no replica remains on node w-1"}},
		{"replicas only elsewhere", storage.Target{Node: "w-4"}, replicas, time.Minute, time.Hour, storage.EvacuationDone, nil, nil},
		{"done even after the timeout", storage.Target{Node: "w-4"}, replicas, 2 * time.Hour, time.Hour, storage.EvacuationDone, nil, nil},
		{"node still holds two", storage.Target{Node: "w-1"}, replicas, 10 * time.Minute, time.Hour, storage.EvacuationWaiting,
			[]string{"pvc-a-r-2", "pvc-b-r-1"}, []string{"2 replicas (pvc-a-r-2, pvc-b-r-1) still on node w-1", "volumes pvc-a, pvc-b", "10m0s of 1h0m0s"}},
		{"one disk of the node", storage.Target{Node: "w-1", Disk: "disk-2"}, replicas, time.Minute, time.Hour, storage.EvacuationWaiting,
			[]string{"pvc-b-r-1"}, []string{"1 replica (pvc-b-r-1) still on disk disk-2 of node w-1"}},
		{"another disk of the node is done", storage.Target{Node: "w-1", Disk: "disk-3"}, replicas, time.Minute, time.Hour, storage.EvacuationDone, nil, nil},
		{"a disk ID on another node is not the target's", storage.Target{Node: "w-3", Disk: "disk-1"}, replicas, time.Minute, time.Hour, storage.EvacuationDone, nil, nil},
		{"just before the timeout", storage.Target{Node: "w-1"}, replicas, time.Hour - time.Second, time.Hour, storage.EvacuationWaiting, []string{"pvc-a-r-2", "pvc-b-r-1"}, nil},
		{"at the timeout it pauses", storage.Target{Node: "w-1"}, replicas, time.Hour, time.Hour, storage.EvacuationPaused,
			[]string{"pvc-a-r-2", "pvc-b-r-1"}, []string{"did not finish within 1h0m0s", "volumes pvc-a, pvc-b", "healthy replica on another node"}},
		{"zero timeout is the default", storage.Target{Node: "w-1"}, replicas, storage.DefaultEvacuationTimeout, 0, storage.EvacuationPaused, []string{"pvc-a-r-2", "pvc-b-r-1"}, []string{"within 30m0s"}},
		{"zero timeout, before the default", storage.Target{Node: "w-1"}, replicas, storage.DefaultEvacuationTimeout - time.Minute, 0, storage.EvacuationWaiting, []string{"pvc-a-r-2", "pvc-b-r-1"}, nil},
		{"a clock behind the start counts as zero", storage.Target{Node: "w-1"}, replicas, -time.Hour, time.Minute, storage.EvacuationWaiting, []string{"pvc-a-r-2", "pvc-b-r-1"}, []string{"0s of 1m0s"}},
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := storage.EvacuationStatus(tc.target, tc.replicas, t0, t0.Add(tc.elapsed), tc.timeout)
			if got.Phase != tc.want {
				t.Errorf("phase %s, want %s (%s)", got.Phase, tc.want, got.Message)
			}

			if !slices.Equal(got.Remaining, tc.remaining) {
				t.Errorf("remaining %v, want %v", got.Remaining, tc.remaining)
			}

			for _, m := range tc.message {
				if !strings.Contains(got.Message, m) {
					t.Errorf("message %q does not say %q", got.Message, m)
				}
			}
		})
	}
}

func TestEvacuationStatusListsAtMostFive(t *testing.T) {
	rs := make([]storage.Replica, 0, 7)
	for _, n := range []string{"r1", "r2", "r3", "r4", "r5", "r6", "r7"} {
		rs = append(rs, storage.Replica{Name: n, Volume: "v-" + n, Node: "w-1"})
	}

	got := storage.EvacuationStatus(storage.Target{Node: "w-1"}, rs, time.Time{}, time.Time{}.Add(time.Minute), time.Hour)
	if !strings.Contains(got.Message, "7 replicas (r1, r2, r3, r4, r5 and 2 more)") {
		t.Errorf("message %q", got.Message)
	}
}
