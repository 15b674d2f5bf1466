package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The operation commands run here without a controller: the tests write an
// operation's status as the controller would, and check what the CLI prints
// and writes.

func newOperation(ns, name, cluster string) *ichorv1alpha1.TalosOperation {
	return &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: cluster, Type: ichorv1alpha1.OperationConfig},
	}
}

// createOperation creates op and writes its status through the status subresource.
func createOperation(t *testing.T, op *ichorv1alpha1.TalosOperation) {
	t.Helper()
	st := op.Status
	must(t, k8s.Create(context.Background(), op))
	op.Status = st
	must(t, k8s.Status().Update(context.Background(), op))
}

func getOperation(t *testing.T, ns, name string) *ichorv1alpha1.TalosOperation {
	t.Helper()
	op := &ichorv1alpha1.TalosOperation{}
	must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, op))
	return op
}

// setOperationStatus rewrites the status of an operation, as the controller would.
func setOperationStatus(t *testing.T, ns, name string, mutate func(st *ichorv1alpha1.TalosOperationStatus)) {
	t.Helper()
	op := getOperation(t, ns, name)
	mutate(&op.Status)
	must(t, k8s.Status().Update(context.Background(), op))
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))}
}

const failureReason = "step drain of machine w-1 failed: evicting pod db-0: PodDisruptionBudget db allows no disruption. " +
	"Fix the cause, then resume: `ichor operation resume config-paused` (or annotate ichor.maesh.dev/resume with a new value)"

// failedOperation is paused on a failed drain of w-1, after cp-1 was done.
func failedOperation(ns, name string) *ichorv1alpha1.TalosOperation {
	op := newOperation(ns, name, "prod")
	started := metav1.NewTime(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	op.Status = ichorv1alpha1.TalosOperationStatus{
		Phase: ichorv1alpha1.OperationPaused, Step: "rollout", FailedStep: "drain", FailureReason: failureReason,
		StartedAt: &started,
		Conditions: []metav1.Condition{
			cond(ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.FailedReason, "step drain of machine w-1 failed"),
			cond(ichorv1alpha1.LockAcquiredCondition, metav1.ConditionTrue, "Held", "holds the cluster lock as ichor-controller/op/"+ns+"/"+name),
		},
		Machines: []ichorv1alpha1.MachineProgress{
			{Name: "cp-1", Role: ichorv1alpha1.RoleControlPlane, Phase: ichorv1alpha1.MachineDone, Step: "done"},
			{Name: "w-1", Role: ichorv1alpha1.RoleWorker, Phase: ichorv1alpha1.MachineFailed, Step: "drain", Message: "evicting pod db-0: PodDisruptionBudget db allows no disruption"},
			{Name: "w-2", Role: ichorv1alpha1.RoleWorker, Phase: ichorv1alpha1.MachinePending},
		},
	}
	return op
}

func TestOperationListAndGet(t *testing.T) {
	ns := namespace(t, "op-list")
	createOperation(t, failedOperation(ns, "config-paused"))
	done := newOperation(ns, "config-done", "other")
	done.Status = ichorv1alpha1.TalosOperationStatus{Phase: ichorv1alpha1.OperationSucceeded, Machines: []ichorv1alpha1.MachineProgress{
		{Name: "o-1", Phase: ichorv1alpha1.MachineDone}, {Name: "o-2", Phase: ichorv1alpha1.MachineSkipped}}}
	createOperation(t, done)

	list := mustSucceed(t, ichor(t, "operation", "list", "-n", ns))
	golden(t, "operation-list.golden", normaliseTableAges(list.stdout))

	get := mustSucceed(t, ichor(t, "operation", "get", "config-paused", "-n", ns))
	golden(t, "operation-get.golden", ageLine.ReplaceAllString(get.stdout, "${1}<age>"))

	filtered := mustSucceed(t, ichor(t, "operation", "list", "-n", ns, "--cluster", "other"))
	if !strings.Contains(filtered.stdout, "config-done") || strings.Contains(filtered.stdout, "config-paused") {
		t.Fatalf("--cluster other must list only that cluster's operations:\n%s", filtered.stdout)
	}
	empty := mustSucceed(t, ichor(t, "operation", "list", "-n", ns, "--cluster", "nope"))
	if !strings.Contains(empty.stdout, "No operations in namespace op-list for cluster nope") {
		t.Fatalf("an empty filtered list must say so: %q", empty.stdout)
	}

	var obj ichorv1alpha1.TalosOperation
	js := mustSucceed(t, ichor(t, "operation", "get", "config-paused", "-n", ns, "-o", "json"))
	must(t, json.Unmarshal([]byte(js.stdout), &obj))
	if obj.Kind != "TalosOperation" || obj.ManagedFields != nil || obj.Status.FailureReason != failureReason || len(obj.Status.Machines) != 3 {
		t.Fatalf("-o json must print the whole operation without managed fields: %+v", obj)
	}
	y := mustSucceed(t, ichor(t, "op", "list", "-n", ns, "-o", "yaml"))
	if !strings.Contains(y.stdout, "kind: TalosOperationList") || !strings.Contains(y.stdout, "name: config-done") {
		t.Fatalf("-o yaml must print the list:\n%s", y.stdout)
	}

	mustFail(t, ichor(t, "operation", "get", "config-nope", "-n", ns), `TalosOperation "config-nope" not found`, "config-done, config-paused")
	mustFail(t, ichor(t, "operation", "get", "-n", ns), "takes one OPERATION")
}

func TestOperationPause(t *testing.T) {
	ns := namespace(t, "op-pause")
	running := newOperation(ns, "config-running", "prod")
	running.Status.Phase = ichorv1alpha1.OperationRunning
	createOperation(t, running)

	r := mustSucceed(t, ichor(t, "operation", "pause", "config-running", "-n", ns))
	if !strings.Contains(r.stdout, "pauses after its current step") {
		t.Fatalf("pause output: %s", r.stdout)
	}
	op := getOperation(t, ns, "config-running")
	if !op.Spec.Paused {
		t.Fatal("pause must set spec.paused")
	}
	rv := op.ResourceVersion
	r = mustSucceed(t, ichor(t, "operation", "pause", "config-running", "-n", ns))
	if !strings.Contains(r.stdout, "already paused") || getOperation(t, ns, "config-running").ResourceVersion != rv {
		t.Fatalf("pausing a paused operation must say so and write nothing: %s", r.stdout)
	}

	done := newOperation(ns, "config-done", "prod")
	done.Status.Phase = ichorv1alpha1.OperationSucceeded
	createOperation(t, done)
	mustFail(t, ichor(t, "operation", "pause", "config-done", "-n", ns), "has succeeded", "cannot be paused", "nothing was changed")
	if getOperation(t, ns, "config-done").Spec.Paused {
		t.Fatal("a refused pause wrote the operation")
	}
	mustFail(t, ichor(t, "operation", "pause", "config-nope", "-n", ns), `TalosOperation "config-nope" not found`)
}

func TestOperationResume(t *testing.T) {
	ns := namespace(t, "op-resume")

	// Paused on a failed step: each resume sets a new token.
	createOperation(t, failedOperation(ns, "config-paused"))
	r := mustSucceed(t, ichor(t, "operation", "resume", "config-paused", "-n", ns))
	if !strings.Contains(r.stdout, "re-runs its failed step drain") {
		t.Fatalf("resume output: %s", r.stdout)
	}
	op := getOperation(t, ns, "config-paused")
	first := op.Annotations[ichorv1alpha1.ResumeAnnotation]
	if first == "" || op.Spec.Paused {
		t.Fatalf("resume of a failed step must set %s: %v", ichorv1alpha1.ResumeAnnotation, op.Annotations)
	}
	if _, err := time.Parse(time.RFC3339Nano, first); err != nil {
		t.Fatalf("the resume token is a time: %v", err)
	}
	get := mustSucceed(t, ichor(t, "operation", "get", "config-paused", "-n", ns))
	if !strings.Contains(get.stdout, "not yet acted on by the controller") {
		t.Fatalf("get must show a resume the controller has not acted on:\n%s", get.stdout)
	}
	mustSucceed(t, ichor(t, "operation", "resume", "config-paused", "-n", ns))
	second := getOperation(t, ns, "config-paused").Annotations[ichorv1alpha1.ResumeAnnotation]
	if second == "" || second == first {
		t.Fatalf("a second resume must set a new token: %q then %q", first, second)
	}

	// Paused by a person: spec.paused goes back to false, no annotation.
	byHand := newOperation(ns, "config-byhand", "prod")
	byHand.Spec.Paused = true
	byHand.Status.Phase = ichorv1alpha1.OperationPaused
	createOperation(t, byHand)
	r = mustSucceed(t, ichor(t, "operation", "resume", "config-byhand", "-n", ns))
	op = getOperation(t, ns, "config-byhand")
	if op.Spec.Paused || op.Annotations[ichorv1alpha1.ResumeAnnotation] != "" || !strings.Contains(r.stdout, "no longer paused") {
		t.Fatalf("resume of a paused operation must clear spec.paused only: paused=%v annotations=%v\n%s", op.Spec.Paused, op.Annotations, r.stdout)
	}

	// Running, and completed: refused, nothing written.
	running := newOperation(ns, "config-running", "prod")
	running.Status.Phase = ichorv1alpha1.OperationRunning
	createOperation(t, running)
	rv := getOperation(t, ns, "config-running").ResourceVersion
	mustFail(t, ichor(t, "operation", "resume", "config-running", "-n", ns), "is not paused", "phase Running", "nothing was changed")
	if getOperation(t, ns, "config-running").ResourceVersion != rv {
		t.Fatal("a refused resume wrote the running operation")
	}
	failed := newOperation(ns, "config-failed", "prod")
	failed.Status.Phase = ichorv1alpha1.OperationFailed
	createOperation(t, failed)
	rv = getOperation(t, ns, "config-failed").ResourceVersion
	mustFail(t, ichor(t, "operation", "resume", "config-failed", "-n", ns), "has failed", "cannot be resumed", "nothing was changed")
	if getOperation(t, ns, "config-failed").ResourceVersion != rv {
		t.Fatal("a refused resume wrote the failed operation")
	}
}

// follower runs the binary in the background until it exits by itself.
type follower struct {
	out, errOut *lockedBuffer
	done        chan error
}

func startFollow(t *testing.T, stdin string, args ...string) *follower {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmd := exec.CommandContext(ctx, bin, args...) //nolint:gosec // the binary the suite built
	cmd.Env = baseEnv(t)
	cmd.Stdin = strings.NewReader(stdin)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	f := &follower{out: &lockedBuffer{}, errOut: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = f.errOut
	must(t, cmd.Start())
	copied := make(chan struct{})
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			_, _ = io.WriteString(f.out, s.Text()+"\n")
		}
		close(copied)
	}()
	go func() {
		<-copied
		f.done <- cmd.Wait()
	}()
	t.Cleanup(func() { cancel(); <-copied })
	return f
}

// wait returns the exit error once the process ended by itself.
func (f *follower) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-f.done:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatalf("the command did not end; stdout:\n%s\nstderr:\n%s", f.out.String(), f.errOut.String())
		return nil
	}
}

// TestOperationGetWatch: `operation get --watch` prints each change and
// ends, non-zero, when the operation pauses on a failure.
func TestOperationGetWatch(t *testing.T) {
	ns := namespace(t, "op-watch")
	createOperation(t, newOperation(ns, "config-w", "prod"))
	f := startFollow(t, "", "operation", "get", "config-w", "--watch", "-n", ns)
	testenv.Eventually(t, 0, "the changes header", testenv.Holds(func() bool { return strings.Contains(f.out.String(), "Changes (Ctrl-C stops):") }))

	setOperationStatus(t, ns, "config-w", func(st *ichorv1alpha1.TalosOperationStatus) {
		st.Phase, st.Step = ichorv1alpha1.OperationRunning, "rollout"
		st.Machines = []ichorv1alpha1.MachineProgress{
			{Name: "cp-1", Role: ichorv1alpha1.RoleControlPlane, Phase: ichorv1alpha1.MachineInProgress, Step: "reboot", Message: "rebooting"},
			{Name: "w-1", Role: ichorv1alpha1.RoleWorker, Phase: ichorv1alpha1.MachinePending},
		}
	})
	testenv.Eventually(t, 0, "the running line", testenv.Holds(func() bool {
		return strings.Contains(f.out.String(), "Running") && strings.Contains(f.out.String(), "cp-1") && strings.Contains(f.out.String(), "0/2")
	}))
	select {
	case err := <-f.done:
		t.Fatalf("the watch ended while the operation runs: %v\n%s", err, f.errOut.String())
	default:
	}
	setOperationStatus(t, ns, "config-w", func(st *ichorv1alpha1.TalosOperationStatus) {
		st.Phase, st.FailedStep, st.FailureReason = ichorv1alpha1.OperationPaused, "reboot", "step reboot of machine cp-1 failed: the node did not come back"
		st.Machines[0].Phase = ichorv1alpha1.MachineFailed
	})
	if err := f.wait(t); err == nil {
		t.Fatalf("the watch of an operation that paused on a failure must exit non-zero:\n%s", f.out.String())
	}
	if !strings.Contains(f.errOut.String(), "paused on a failed step (reboot): step reboot of machine cp-1 failed") {
		t.Fatalf("the watch must end with the failure reason; stderr:\n%s", f.errOut.String())
	}
}
