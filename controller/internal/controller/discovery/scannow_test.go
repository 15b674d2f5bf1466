package discovery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/clusterreq"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestDiscoveryScanNow: with an hour between scans, a machine that boots into
// maintenance after the cluster's first scan is found only when a person asks
// for a scan (the scan-requested-at annotation, written as `ichor cluster
// discovery scan` writes it), and then within seconds; a second request right
// after that scan is rate-limited: it is answered, not dropped, by a scan no
// sooner than the request gap after the one before.
func TestDiscoveryScanNow(t *testing.T) {
	ctx := context.Background()
	late := emMachine("late")
	key := client.ObjectKey{Namespace: ns, Name: "scannow"}

	testenv.Must(t, k8s.Create(ctx, testCluster(key.Name, ichorv1alpha1.DiscoverySpec{Subnets: []string{"127.77.16.40/30"}})))

	// The first scan, at creation, finds nothing: late is off.
	first := waitScanned(t, key.Name, "the first scan", func(c *ichorv1alpha1.TalosCluster) bool { return c.Status.Discovery.LastScanTime != nil })
	if ms := machinesOf(t, key.Name); len(ms) != 0 {
		t.Fatalf("%d machines before late booted", len(ms))
	}

	if next := first.Status.Discovery.NextScanTime; next == nil || next.Sub(first.Status.Discovery.LastScanTime.Time) < 59*time.Minute {
		t.Fatalf("nextScanTime %v, want the hour's interval after the first scan %v", next, first.Status.Discovery.LastScanTime)
	}

	testenv.Must(t, late.PowerOn())
	t.Cleanup(func() { _ = late.PowerOff() })

	// Ask for a scan once the machine is up, as a person would.
	testenv.Must(t, late.WaitStage(ctx, runtime.MachineStageMaintenance, waitTimeout))

	asked := time.Now()
	req1, err := clusterreq.RequestScan(ctx, k8s, key, asked)
	testenv.Must(t, err)

	token1 := req1.Cluster.Annotations[ichorv1alpha1.ScanRequestedAnnotation]
	answered := waitScanned(t, key.Name, "the requested scan", func(c *ichorv1alpha1.TalosCluster) bool {
		return c.Status.Discovery.LastHandledScanRequest == token1
	})

	m := onlyMachine(t, key.Name)
	if m.Spec.Address != late.IP() || m.Spec.Approval.State != ichorv1alpha1.ApprovalPending {
		t.Fatalf("machine %s at %s is %s, want late's address, pending", m.Name, m.Spec.Address, m.Spec.Approval.State)
	}

	// Within seconds: the request gap at most, plus a busy machine's slack;
	// the interval (an hour) would have been far longer.
	if took := time.Since(asked); took > scanRequestGap+time.Minute {
		t.Fatalf("the requested scan took %s", took)
	}

	scan1 := answered.Status.Discovery.LastScanTime.Time

	// A second request right after that scan waits for the gap.
	req2, err := clusterreq.RequestScan(ctx, k8s, key, time.Now())
	testenv.Must(t, err)

	token2 := req2.Cluster.Annotations[ichorv1alpha1.ScanRequestedAnnotation]
	if token2 == token1 {
		t.Fatal("the second request wrote the first one's token")
	}

	second := waitScanned(t, key.Name, "the second requested scan", func(c *ichorv1alpha1.TalosCluster) bool {
		return c.Status.Discovery.LastHandledScanRequest == token2
	})

	scan2 := second.Status.Discovery.LastScanTime.Time
	if gap := scan2.Sub(scan1); gap < scanRequestGap {
		t.Fatalf("the second scan ran %s after the first (%s, %s), want at least the request gap %s", gap, scan1, scan2, scanRequestGap)
	}

	if ms := machinesOf(t, key.Name); len(ms) != 1 {
		t.Fatalf("%d machines after the second scan, want late's one", len(ms))
	}
}

// waitScanned waits until the cluster's status satisfies ok and returns it.
func waitScanned(t *testing.T, name, what string, ok func(*ichorv1alpha1.TalosCluster) bool) *ichorv1alpha1.TalosCluster {
	t.Helper()

	var out *ichorv1alpha1.TalosCluster

	testenv.Eventually(t, waitTimeout, what, func() error {
		c := getCluster(t, name)
		if !ok(c) {
			return fmt.Errorf("not yet: discovery status %+v", c.Status.Discovery)
		}

		out = c

		return nil
	})

	return out
}
