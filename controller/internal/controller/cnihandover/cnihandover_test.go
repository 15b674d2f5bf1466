package cnihandover

import (
	"testing"
	"time"
)

// TestBackoffGrows: a Job that keeps failing is retried later each time, up
// to ten minutes.
func TestBackoffGrows(t *testing.T) {
	r := &Reconciler{FirstBackoff: 30 * time.Second}

	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	for i, w := range want {
		if got := r.backoff(i + 1); got != w {
			t.Errorf("backoff after attempt %d = %s, want %s", i+1, got, w)
		}
	}
}
