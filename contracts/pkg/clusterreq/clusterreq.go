// Package clusterreq holds the writes of the cluster-wide requests a person
// makes, shared by the ichor CLI and ichor-ui (both write as that person,
// through the client they pass): pausing and resuming a cluster, and asking
// discovery to scan now. Each reads the cluster afresh, runs the shared
// checks of package guard on what it read, and writes with that read's
// resourceVersion, retrying on a conflict; a refusal writes nothing.
package clusterreq

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// Refused is the error of a request the guard checks refused; nothing was written.
type Refused struct {
	// Refusals say what is wrong and what to do instead.
	Refusals []guard.Refusal
}

func (e *Refused) Error() string {
	lines := make([]string, 0, len(e.Refusals))
	for _, r := range e.Refusals {
		lines = append(lines, r.Error())
	}
	return strings.Join(lines, "; ")
}

// Result is the cluster after a request, and whether the request changed it.
type Result struct {
	// Cluster is the cluster as written, or as read when nothing changed.
	Cluster *ichorv1alpha1.TalosCluster
	// Changed is false when the cluster already was as asked.
	Changed bool
}

// write reads the cluster at key, lets change decide and mutate, and updates
// it when change says so; a conflict is retried on a fresh read.
func write(ctx context.Context, c client.Client, key client.ObjectKey, change func(*ichorv1alpha1.TalosCluster) (bool, error)) (Result, error) {
	var res Result
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &ichorv1alpha1.TalosCluster{}
		if err := c.Get(ctx, key, cur); err != nil {
			return err
		}
		changed, err := change(cur)
		if err != nil {
			return err
		}
		res = Result{Cluster: cur, Changed: changed}
		if !changed {
			return nil
		}
		return c.Update(ctx, cur)
	})
	return res, err
}

// Pause sets spec.paused, recording reason (when given) in the
// paused-reason annotation. Every controller then leaves the cluster and its
// objects alone: no provisioning, removal, configuration or drift
// correction, operations or discovery. A paused cluster keeps its pause; a
// new reason replaces the old one.
func Pause(ctx context.Context, c client.Client, key client.ObjectKey, reason string) (Result, error) {
	reason = strings.TrimSpace(reason)
	if rf := guard.PauseReason(reason); len(rf) > 0 {
		return Result{}, &Refused{Refusals: rf}
	}
	return write(ctx, c, key, func(cur *ichorv1alpha1.TalosCluster) (bool, error) {
		old, hadReason := cur.Annotations[ichorv1alpha1.PausedReasonAnnotation]
		if cur.Spec.Paused && (reason == "" || (hadReason && old == reason)) {
			return false, nil
		}
		if !cur.Spec.Paused {
			// A reason left from an earlier pause does not describe this one.
			delete(cur.Annotations, ichorv1alpha1.PausedReasonAnnotation)
		}
		cur.Spec.Paused = true
		if reason != "" {
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			cur.Annotations[ichorv1alpha1.PausedReasonAnnotation] = reason
		}
		return true, nil
	})
}

// Resume clears spec.paused and the pause reason: the controllers take the
// cluster up where they left it.
func Resume(ctx context.Context, c client.Client, key client.ObjectKey) (Result, error) {
	return write(ctx, c, key, func(cur *ichorv1alpha1.TalosCluster) (bool, error) {
		_, hadReason := cur.Annotations[ichorv1alpha1.PausedReasonAnnotation]
		if !cur.Spec.Paused && !hadReason {
			return false, nil
		}
		cur.Spec.Paused = false
		delete(cur.Annotations, ichorv1alpha1.PausedReasonAnnotation)
		return true, nil
	})
}

// RequestScan asks discovery to scan the cluster's subnets and addresses
// now: it sets the scan-requested-at annotation to now (RFC 3339, UTC). The
// controller answers within seconds, or guard.MinScanRequestGap after its
// last scan when that was more recent; status.discovery.nextScanTime says
// when. A request while another is pending replaces it (one scan answers
// both). Refused, with nothing written, for a paused cluster and one with
// nothing to scan.
func RequestScan(ctx context.Context, c client.Client, key client.ObjectKey, now time.Time) (Result, error) {
	token := now.UTC().Format(time.RFC3339Nano)
	return write(ctx, c, key, func(cur *ichorv1alpha1.TalosCluster) (bool, error) {
		if rf := guard.ScanRequest(cur); len(rf) > 0 {
			return false, &Refused{Refusals: rf}
		}
		if cur.Annotations[ichorv1alpha1.ScanRequestedAnnotation] == token {
			return false, nil
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[ichorv1alpha1.ScanRequestedAnnotation] = token
		return true, nil
	})
}

// Describe says what a scan request's state is, for people: pending (and
// when it is due) or answered.
func Describe(c *ichorv1alpha1.TalosCluster) string {
	d := c.Status.Discovery
	if c.PendingScanRequest() == "" {
		if d.LastScanTime == nil {
			return "no scan has run yet"
		}
		return fmt.Sprintf("last scan at %s", d.LastScanTime.UTC().Format(time.RFC3339))
	}
	if d.NextScanTime != nil {
		return fmt.Sprintf("a scan is requested and due at %s", d.NextScanTime.UTC().Format(time.RFC3339))
	}
	return "a scan is requested; the controller has not picked it up yet"
}
