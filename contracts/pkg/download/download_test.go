package download

import (
	"strings"
	"testing"
	"time"
)

func TestCaptureNormalize(t *testing.T) {
	got, err := Capture{Interface: "eth0"}.Normalize()
	if err != nil || got.Duration != DefaultCaptureDuration || got.SnapLen != DefaultSnapLen {
		t.Fatalf("defaults: %+v, %v", got, err)
	}

	for _, tc := range []struct {
		c    Capture
		want string
	}{
		{Capture{}, "interface is required"},
		{Capture{Interface: "eth0/1"}, "not a network interface name"},
		{Capture{Interface: "averyveryverylongname0"}, "not a network interface name"},
		{Capture{Interface: "eth0", Duration: time.Hour}, "outside 1s to 5m0s"},
		{Capture{Interface: "eth0", Duration: time.Millisecond}, "outside 1s to 5m0s"},
		{Capture{Interface: "eth0", SnapLen: 10}, "snap length 10 is outside 64 to 65535"},
		{Capture{Interface: "eth0", SnapLen: 70000}, "snap length 70000 is outside"},
	} {
		if _, err := tc.c.Normalize(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}

func TestEvent(t *testing.T) {
	e := Event(EtcdSnapshot, "ichor:ada", "cp-1", "", "ichor", Target{Kind: "TalosCluster", Namespace: "ns", Name: "prod", UID: "u"}, time.Unix(0, 0))
	if e.Type != "Warning" || e.Reason != EventReason || e.Message != "ichor:ada downloads an etcd snapshot of node cp-1" ||
		e.InvolvedObject.Kind != "TalosCluster" || e.InvolvedObject.Name != "prod" || e.Namespace != "ns" {
		t.Errorf("event %+v", e)
	}
}
