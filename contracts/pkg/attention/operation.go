package attention

import (
	"fmt"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// operationItems are the problems of the cluster's operations: one paused
// (by a person or on a failed step), one waiting for credentials or for its
// pre-checks, and one failed that no later operation of its type made good.
func operationItems(cluster string, ops []ichorv1alpha1.TalosOperation) []Item {
	var out []Item

	for i := range ops {
		op := &ops[i]
		if cluster != "" && op.Spec.ClusterName != cluster {
			continue
		}

		it := Item{
			Key: KindOperation + "/" + op.Name, Kind: KindOperation, Subject: op.Name,
			Since: op.CreationTimestamp.Time, Command: "ichor operation get " + op.Name, Action: ActionOpenOperation,
		}
		if ready := apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.ReadyCondition); ready != nil {
			it.Since, it.Detail = ready.LastTransitionTime.Time, detail(ready)
		}

		what := fmt.Sprintf("operation %s (%s)", op.Name, op.Spec.Type)

		switch op.Status.Phase {
		case ichorv1alpha1.OperationSucceeded:
			continue
		case ichorv1alpha1.OperationFailed:
			if madeGood(op, ops) {
				continue
			}

			it.Severity, it.Summary = Error, what+" failed"+step(op.Status.FailedStep)+": a new operation is needed"
			if op.Status.FailureReason != "" {
				it.Detail = op.Status.FailureReason
			}

			if op.Status.CompletedAt != nil {
				it.Since = op.Status.CompletedAt.Time
			}
		case ichorv1alpha1.OperationAwaitingCredentials:
			it.Severity, it.Summary = Warning, what+" waits for the operator to download the new credentials"
		default:
			switch {
			case op.Status.FailureReason != "":
				it.Severity, it.Action, it.Command = Error, ActionResumeOperation, "ichor operation resume "+op.Name
				it.Summary, it.Detail = what+" stopped"+step(op.Status.FailedStep)+": "+failureCause(op.Status.FailureReason), op.Status.FailureReason
			case op.Status.Phase == ichorv1alpha1.OperationPaused && readyReason(op) == ichorv1alpha1.EvacuationPausedReason:
				// It goes on by itself once the storage system has moved the replicas: nothing to resume.
				it.Severity, it.Summary = Warning, what+" waits: a node's storage evacuation reached its timeout with replicas still on it"
			case op.Status.Phase == ichorv1alpha1.OperationPaused || op.Spec.Paused && op.Status.Phase != "":
				it.Severity, it.Action, it.Command = Warning, ActionResumeOperation, "ichor operation resume "+op.Name
				it.Summary = what + " is paused"
			default:
				pre := apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.PreChecksPassedCondition)
				if pre == nil || !ichorv1alpha1.ConditionAbnormal(*pre) {
					continue
				}

				it.Severity, it.Summary, it.Detail, it.Since = Warning, what+" waits: its pre-checks fail", detail(pre), pre.LastTransitionTime.Time
			}
		}

		out = append(out, it)
	}

	return out
}

// readyReason is the reason of an operation's Ready condition, "" without one.
func readyReason(op *ichorv1alpha1.TalosOperation) string {
	if c := apimeta.FindStatusCondition(op.Status.Conditions, ichorv1alpha1.ReadyCondition); c != nil {
		return c.Reason
	}

	return ""
}

// madeGood reports whether an operation of the same type and cluster was
// created after op and succeeded.
func madeGood(op *ichorv1alpha1.TalosOperation, ops []ichorv1alpha1.TalosOperation) bool {
	for i := range ops {
		o := &ops[i]
		if o.Spec.Type == op.Spec.Type && o.Spec.ClusterName == op.Spec.ClusterName &&
			o.Status.Phase == ichorv1alpha1.OperationSucceeded && o.CreationTimestamp.After(op.CreationTimestamp.Time) {
			return true
		}
	}

	return false
}

func step(s string) string {
	if s == "" {
		return ""
	}

	return " at step " + s
}

// failureCause is the plain cause of a failed step: a node error's cause
// (Cause), or the failure's first clause.
func failureCause(msg string) string {
	if c, ok := transportCause(msg); ok {
		return "a node's Talos API does not answer (" + c + ")"
	}

	first, _, _ := strings.Cut(msg, ": ")
	if len(first) > 160 {
		first = first[:157] + "..."
	}

	return first
}

// Cause is the plain cause of a node error as a condition holds it
// (talos.Message): the transport's words without the gRPC wrapping
// ("connection refused", "timed out", "no route to host", "TLS handshake
// failed", ...), or the message itself cut to its first clause.
func Cause(msg string) string {
	if c, ok := transportCause(msg); ok {
		return c
	}

	if msg == "" {
		return "no reason given"
	}

	return failureCause(msg)
}

// transportCauses map what gRPC and the network say to a few plain words,
// most specific first.
// The causes several transport messages share.
const (
	causeTimedOut = "timed out"
	causeTLS      = "TLS handshake failed"
	causeDenied   = "permission denied"
)

var transportCauses = []struct{ match, cause string }{
	{"connection refused", "connection refused"},
	{"no route to host", "no route to host"},
	{"network is unreachable", "network unreachable"},
	{"i/o timeout", causeTimedOut},
	{"deadline exceeded", causeTimedOut},
	{"deadlineexceeded", causeTimedOut},
	{"connection reset", "connection reset"},
	{"certificate signed by unknown authority", "its certificate is not signed by the cluster's CA"},
	{"certificate has expired", "a certificate expired"},
	{"bad certificate", "it refused Ichor's certificate"},
	{"authentication handshake failed", causeTLS},
	{"tls:", causeTLS},
	{"x509:", causeTLS},
	{"permissiondenied", causeDenied},
	{"permission denied", causeDenied},
	{"no such host", "its name does not resolve"},
	{"error while dialing", "cannot connect"},
	{"unexpected eof", "the connection closed"},
	{": eof", "the connection closed"},
	{"unavailable", "unavailable"},
}

func transportCause(msg string) (string, bool) {
	l := strings.ToLower(msg)
	for _, tc := range transportCauses {
		if strings.Contains(l, tc.match) {
			return tc.cause, true
		}
	}

	return "", false
}
