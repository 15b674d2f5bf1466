// Package clusterreq holds the writes of the cluster-wide requests a person
// makes, shared by the ichor CLI and ichor-ui (both write as that person,
// through the client they pass): pausing and resuming a cluster, asking
// discovery to scan now, and setting the user's layer of Cilium values. Each reads the cluster afresh, runs the shared
// checks of package guard on what it read, and writes with that read's
// resourceVersion, retrying on a conflict; a refusal writes nothing.
package clusterreq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/valuesedit"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// Refused is the error of a request the guard checks refused; nothing was written.
type Refused struct {
	// Refusals say what is wrong and what to do instead.
	Refusals []guard.Refusal
	// Permission is set when the caller lacks a permission (the request
	// itself may be fine).
	Permission bool
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

// SetCiliumValues replaces the user's layer of Cilium values
// (spec.cni.cilium.values) with proposed (YAML or JSON; empty removes the
// layer). The layer is checked first with the webhook's rule
// (valuesedit.Parse: a map, no Ichor-owned key), then the caller's right to
// change it (`update` on `talosclusters/cilium-values`, asked as the caller
// with a SelfSubjectAccessReview through c, so the refusal is the webhook's
// even where the webhook is off); a refusal is a *Refused and writes
// nothing. The controller applies the change through the ichor-cni Job.
func SetCiliumValues(ctx context.Context, c client.Client, key client.ObjectKey, proposed []byte) (Result, error) {
	user, err := valuesedit.Parse(proposed)
	var vr *valuesedit.Refused
	if errors.As(err, &vr) {
		return Result{}, &Refused{Refusals: vr.Refusals}
	}
	if err != nil {
		return Result{}, err
	}
	var raw []byte
	if len(user) > 0 {
		if raw, err = json.Marshal(user); err != nil {
			return Result{}, err
		}
	}
	return write(ctx, c, key, func(cur *ichorv1alpha1.TalosCluster) (bool, error) {
		if cur.Spec.CNI.Preset == ichorv1alpha1.CNIPresetUnmanaged {
			return false, &Refused{Refusals: []guard.Refusal{{
				Field: "spec.cni.cilium.values", Rule: valuesedit.ErrUnmanaged.Error(),
				WayOut: "configure the cluster's own CNI with its own tools",
			}}}
		}
		old := cur.DeepCopy()
		stored, err := valuesedit.UserLayer(cur)
		if err == nil && reflect.DeepEqual(stored, user) {
			return false, nil
		}
		if raw == nil {
			if cur.Spec.CNI.Cilium != nil {
				cur.Spec.CNI.Cilium.Values = nil
			}
		} else {
			if cur.Spec.CNI.Cilium == nil {
				cur.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{}
			}
			cur.Spec.CNI.Cilium.Values = &runtime.RawExtension{Raw: raw}
		}
		for _, req := range guard.ClusterRequirements(old, cur) {
			if err := allowed(ctx, c, req); err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// allowed asks the API server, as the caller of c, whether it holds req's
// permission; a refusal is a *Refused with the requirement's words.
func allowed(ctx context.Context, c client.Client, req guard.Requirement) error {
	p := req.Permission
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: p.Namespace, Verb: p.Verb, Group: ichorv1alpha1.GroupVersion.Group,
			Resource: p.Resource, Subresource: p.Subresource, Name: p.Name,
		},
	}}
	if err := c.Create(ctx, review); err != nil {
		return fmt.Errorf("checking whether you hold %s: %w", p, err)
	}
	if !review.Status.Allowed {
		return &Refused{Refusals: []guard.Refusal{req.Refusal("")}, Permission: true}
	}
	return nil
}

// SetAuthentication writes spec.authentication, the OIDC issuers the
// cluster's kube-apiserver trusts (ichor-ui's issuer and an external
// provider), as the caller of c, who needs `update` on
// `talosclusters/authentication` (ichor-admin); it is asked first, so a
// refusal names the permission and writes nothing. A configuration the
// kube-apiserver would refuse, or one the cluster's version contract cannot
// carry, is a *Refused (guard.CheckAuthentication, which the admission
// webhook applies too). The change is an APIServerRestart change: the
// control planes wait for a config rollout (`ichor config apply`).
func SetAuthentication(ctx context.Context, c client.Client, key client.ObjectKey, spec ichorv1alpha1.AuthenticationSpec) (Result, error) {
	if spec.External != nil && reflect.DeepEqual(*spec.External, ichorv1alpha1.ExternalOIDC{}) {
		spec.External = nil
	}
	return write(ctx, c, key, func(cur *ichorv1alpha1.TalosCluster) (bool, error) {
		if reflect.DeepEqual(cur.Spec.Authentication, spec) {
			return false, nil
		}
		old := cur.DeepCopy()
		cur.Spec.Authentication = spec
		if rf := guard.CheckAuthentication(cur); rf != nil {
			return false, &Refused{Refusals: []guard.Refusal{*rf}}
		}
		for _, req := range guard.ClusterRequirements(old, cur) {
			if err := allowed(ctx, c, req); err != nil {
				return false, err
			}
		}
		return true, nil
	})
}
