package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func servedCluster(t *testing.T) *ichorv1alpha1.TalosCluster {
	t.Helper()
	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, admin.Get(context.Background(), client.ObjectKey{Namespace: testNS, Name: testCluster}, c))
	return c
}

// keepCluster restores the served cluster's pause, annotations, discovery
// and conditions when the test ends: the other tests share it.
func keepCluster(t *testing.T) {
	t.Helper()
	before := servedCluster(t)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c := servedCluster(t)
			c.Spec.Paused, c.Spec.Discovery, c.Annotations = before.Spec.Paused, before.Spec.Discovery, before.Annotations
			return admin.Update(ctx, c)
		})
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c := servedCluster(t)
			c.Status.Conditions, c.Status.Discovery = before.Status.Conditions, before.Status.Discovery
			return admin.Status().Update(ctx, c)
		})
	})
}

// TestPauseCluster: an operator pauses with a reason and an admin resumes,
// each as themselves; a viewer's forged calls are refused by RBAC and change
// nothing; the cluster says since when once the controller confirmed it.
func TestPauseCluster(t *testing.T) {
	keepCluster(t)
	ctx := context.Background()
	hc := httpClient()

	for _, path := range []string{"/api/v1/cluster:pause", "/api/v1/cluster:resume"} {
		code, body := rest(t, hc, http.MethodPost, path, viewer(t), `{"reason":"forged"}`)
		if msg, _ := body["message"].(string); code != http.StatusForbidden || !strings.Contains(msg, "may not update talosclusters") {
			t.Fatalf("viewer %s: %d %v, want 403 naming the missing right", path, code, body)
		}
	}
	if c := servedCluster(t); c.Spec.Paused || c.Annotations[ichorv1alpha1.PausedReasonAnnotation] != "" {
		t.Fatalf("a viewer's refused call changed the cluster: paused %t, annotations %v", c.Spec.Paused, c.Annotations)
	}

	code, body := rest(t, hc, http.MethodPost, "/api/v1/cluster:pause", operator(t), `{"reason":"`+strings.Repeat("x", 513)+`"}`)
	if msg, _ := body["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "at most 512") || !strings.Contains(msg, "nothing was changed") {
		t.Fatalf("a reason too long: %d %v, want 400", code, body)
	}
	if servedCluster(t).Spec.Paused {
		t.Fatal("a refused pause paused the cluster")
	}

	resp, err := ichorv1.NewClusterServiceClient(grpcConn(t, operator(t))).PauseCluster(ctx, &ichorv1.PauseClusterRequest{Reason: "disk swap on cp-2"})
	if err != nil {
		t.Fatalf("operator pause: %v", err)
	}
	if got := resp.GetCluster(); !got.GetPaused() || got.GetPausedReason() != "disk swap on cp-2" || got.GetPausedSince() != nil {
		t.Fatalf("response: paused %t reason %q since %v; want paused with the reason, not yet confirmed", got.GetPaused(), got.GetPausedReason(), got.GetPausedSince())
	}
	if c := servedCluster(t); !c.Spec.Paused || c.Annotations[ichorv1alpha1.PausedReasonAnnotation] != "disk swap on cp-2" {
		t.Fatalf("stored: paused %t annotations %v", c.Spec.Paused, c.Annotations)
	}

	// The controller confirms with the Paused condition: the Overview's "since".
	since := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := servedCluster(t)
		c.Status.Conditions = append(c.Status.Conditions, metav1.Condition{Type: ichorv1alpha1.PausedCondition, Status: metav1.ConditionTrue,
			Reason: ichorv1alpha1.PausedReason, Message: "paused", LastTransitionTime: since})
		return admin.Status().Update(ctx, c)
	}))
	cs := ichorv1.NewClusterServiceClient(grpcConn(t, viewer(t)))
	testenv.Eventually(t, 30*time.Second, "the paused-since time in GetCluster", func() error {
		r, err := cs.GetCluster(ctx, &ichorv1.GetClusterRequest{})
		if err != nil {
			return err
		}
		if !r.GetCluster().GetPausedSince().AsTime().Equal(since.Time) {
			return errors.New("not yet")
		}
		return nil
	})

	resumed, err := ichorv1.NewClusterServiceClient(grpcConn(t, adminTok(t))).ResumeCluster(ctx, &ichorv1.ResumeClusterRequest{})
	if err != nil {
		t.Fatalf("admin resume: %v", err)
	}
	if resumed.GetCluster().GetPaused() || resumed.GetCluster().GetPausedReason() != "" {
		t.Fatalf("resume response: %v", resumed.GetCluster())
	}
	c := servedCluster(t)
	if _, ok := c.Annotations[ichorv1alpha1.PausedReasonAnnotation]; c.Spec.Paused || ok {
		t.Fatalf("stored after resume: paused %t annotations %v", c.Spec.Paused, c.Annotations)
	}
}

// TestScanDiscovery: an operator asks for a scan as themselves; a viewer is
// refused; a paused cluster and one with nothing to scan are refused with
// nothing written.
func TestScanDiscovery(t *testing.T) {
	keepCluster(t)
	ctx := context.Background()
	hc := httpClient()
	const path = "/api/v1/cluster/discovery:scan"
	requested := func() string { return servedCluster(t).Annotations[ichorv1alpha1.ScanRequestedAnnotation] }

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := servedCluster(t)
		c.Spec.Discovery.Addresses, c.Spec.Discovery.Subnets = nil, nil
		delete(c.Annotations, ichorv1alpha1.ScanRequestedAnnotation)
		return admin.Update(ctx, c)
	}))
	code, body := rest(t, hc, http.MethodPost, path, operator(t), `{}`)
	if msg, _ := body["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "registers no address or subnet") {
		t.Fatalf("nothing to scan: %d %v, want 400", code, body)
	}

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := servedCluster(t)
		c.Spec.Discovery.Subnets = []string{"10.9.7.0/24"}
		c.Spec.Paused = true
		return admin.Update(ctx, c)
	}))
	code, body = rest(t, hc, http.MethodPost, path, operator(t), `{}`)
	if msg, _ := body["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "is paused") || !strings.Contains(msg, "Resume") {
		t.Fatalf("paused: %d %v, want 400 pointing at Resume", code, body)
	}
	code, body = rest(t, hc, http.MethodPost, path, viewer(t), `{}`)
	if code != http.StatusForbidden {
		t.Fatalf("viewer: %d %v, want 403", code, body)
	}
	if got := requested(); got != "" {
		t.Fatalf("a refused request was written: %q", got)
	}

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := servedCluster(t)
		c.Spec.Paused = false
		return admin.Update(ctx, c)
	}))
	resp, err := ichorv1.NewClusterServiceClient(grpcConn(t, operator(t))).ScanDiscovery(ctx, &ichorv1.ScanDiscoveryRequest{})
	if err != nil {
		t.Fatalf("operator scan: %v", err)
	}
	if !resp.GetCluster().GetDiscovery().GetScanPending() {
		t.Fatalf("the response does not show the request pending: %v", resp.GetCluster().GetDiscovery())
	}
	token := requested()
	if _, err := time.Parse(time.RFC3339Nano, token); err != nil {
		t.Fatalf("the request %q is not an RFC 3339 time: %v", token, err)
	}

	// Answered (as the controller answers it): no longer pending.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := servedCluster(t)
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		c.Status.Discovery.LastScanTime, c.Status.Discovery.LastHandledScanRequest = &now, token
		return admin.Status().Update(ctx, c)
	}))
	cs := ichorv1.NewClusterServiceClient(grpcConn(t, viewer(t)))
	testenv.Eventually(t, 30*time.Second, "the request answered in GetCluster", func() error {
		r, err := cs.GetCluster(ctx, &ichorv1.GetClusterRequest{})
		if err != nil {
			return err
		}
		if r.GetCluster().GetDiscovery().GetScanPending() {
			return errors.New("still pending")
		}
		return nil
	})
}

// TestClusterShowsAutoPatch: the cluster summary says whether automatic patch
// upgrades are on (spec.autoPatch.enabled), off by default.
func TestClusterShowsAutoPatch(t *testing.T) {
	ctx := context.Background()
	hc := httpClient()
	autoPatch := func() any {
		code, body := rest(t, hc, http.MethodGet, "/api/v1/cluster", viewer(t), "")
		if code != http.StatusOK {
			t.Fatalf("GET /api/v1/cluster: %d %v", code, body)
		}
		c, _ := body["cluster"].(map[string]any)
		return c["autoPatch"]
	}
	if got := autoPatch(); got != nil && got != false {
		t.Fatalf("autoPatch of a cluster that did not opt in: %v", got)
	}
	set := func(on bool) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c := servedCluster(t)
			c.Spec.AutoPatch.Enabled = on
			return admin.Update(ctx, c)
		})
	}
	testenv.Must(t, set(true))
	t.Cleanup(func() { _ = set(false) })
	// ichor-ui reads the cluster from its watch cache: poll until it sees the write.
	testenv.EventuallyOK(t, 30*time.Second, "autoPatch true after spec.autoPatch.enabled", func() (bool, string) {
		got := autoPatch()
		return got == true, fmt.Sprintf("autoPatch %v", got)
	})
}

// TestClusterShowsCNI: the cluster summary carries the CNI line `ichor
// cluster get` prints (cni.Describe): the preset and what the controller last
// read from the cluster.
func TestClusterShowsCNI(t *testing.T) {
	ctx := context.Background()
	hc := httpClient()
	cniOf := func() any {
		code, body := rest(t, hc, http.MethodGet, "/api/v1/cluster", viewer(t), "")
		if code != http.StatusOK {
			t.Fatalf("GET /api/v1/cluster: %d %v", code, body)
		}
		c, _ := body["cluster"].(map[string]any)
		return c["cni"]
	}
	setStatus := func(detected, version string) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c := servedCluster(t)
			c.Status.CNI.Detected, c.Status.CNI.CiliumVersion = detected, version
			return admin.Status().Update(ctx, c)
		})
	}
	before := servedCluster(t).Status.CNI
	t.Cleanup(func() { _ = setStatus(before.Detected, before.CiliumVersion) })

	// ichor-ui reads the cluster from its watch cache: poll until it sees each write.
	for _, tc := range []struct{ detected, version, want string }{
		{"", "", "cilium (detected: not read yet)"},
		{"cilium", "v1.20.2", "cilium (detected: cilium v1.20.2)"},
	} {
		testenv.Must(t, setStatus(tc.detected, tc.version))
		testenv.EventuallyOK(t, 30*time.Second, "cni "+tc.want, func() (bool, string) {
			got := cniOf()
			return got == tc.want, fmt.Sprintf("cni %v", got)
		})
	}
}
