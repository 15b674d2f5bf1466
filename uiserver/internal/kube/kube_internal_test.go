package kube

import (
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// TestUnlimitUsersOnlyLiftsTheDefault: a configuration without a limit gets
// no client-side limit (as ctrl.GetConfig's QPS -1), not client-go's 5/s
// shared by every user; a limit the deployment chose is kept.
func TestUnlimitUsersOnlyLiftsTheDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   rest.Config
		qps   float32
		burst int
	}{
		{name: "unset", qps: -1},
		{name: "no client limit", cfg: rest.Config{QPS: -1}, qps: -1},
		{name: "chosen", cfg: rest.Config{QPS: 7, Burst: 9}, qps: 7, burst: 9},
		{name: "own rate limiter", cfg: rest.Config{RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			unlimitUsers(&cfg)
			if cfg.QPS != tc.qps || cfg.Burst != tc.burst {
				t.Fatalf("QPS %v burst %d, want %v and %d", cfg.QPS, cfg.Burst, tc.qps, tc.burst)
			}
		})
	}
}
