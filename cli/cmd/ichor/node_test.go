package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func approved(ns, name, role string) *ichorv1alpha1.TalosMachine {
	m := newMachine(ns, name, "prod")
	m.Spec.Role = role
	m.Spec.Approval = ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "ada"}
	return m
}

func TestNodeRemove(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "remove")
	c := newCluster(ns, "prod")
	c.Spec.ControlPlane.Schedulable = new(true)
	must(t, k8s.Create(ctx, c))
	createMachine(t, approved(ns, "cp-1", ichorv1alpha1.RoleControlPlane))
	w := approved(ns, "w-1", ichorv1alpha1.RoleWorker)
	w.Finalizers = []string{ichorv1alpha1.MachineFinalizer}
	createMachine(t, w)

	// The last control plane is refused by the shared guard; nothing is written.
	mustFail(t, ichor(t, "node", "remove", "cp-1", "-n", ns, "--yes"), "last control plane", "nothing was changed")
	if _, ok := getMachine(t, ns, "cp-1").Annotations[ichorv1alpha1.AllowDeleteAnnotation]; ok {
		t.Fatal("a refused removal left the allow-delete annotation")
	}

	// A wrong confirmation changes nothing.
	r := mustFail(t, ichorWith(t, invocation{stdin: "w-2\n"}, "node", "remove", "w-1", "-n", ns), "not confirmed", "nothing was changed")
	if !strings.Contains(r.stderr, "Type \"w-1\" to confirm") || !strings.Contains(r.stderr, "powers off") {
		t.Fatalf("the confirmation must say what happens and what to type:\n%s", r.stderr)
	}
	mustFail(t, ichorWith(t, invocation{stdin: ""}, "node", "remove", "w-1", "-n", ns), "--yes")
	if m := getMachine(t, ns, "w-1"); m.DeletionTimestamp != nil || len(m.Annotations) != 0 {
		t.Fatalf("an unconfirmed removal changed the machine: %+v", m.ObjectMeta)
	}

	// Confirmed, with --reboot --force --wait: the CLI marks and deletes, then
	// follows until the finalizer (the controller's, here the test's) is gone.
	cmd := exec.CommandContext(ctx, bin, "node", "remove", "w-1", "-n", ns, "--reboot", "--force", "--wait") //nolint:gosec // the binary the suite built
	cmd.Env = baseEnv(t)
	cmd.Stdin = strings.NewReader("w-1\n")
	var out, errOut lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	eventually(t, "the machine to be deleted", func() bool {
		return getMachine(t, ns, "w-1").DeletionTimestamp != nil
	})
	m := getMachine(t, ns, "w-1")
	if m.Annotations[ichorv1alpha1.AllowDeleteAnnotation] != "true" || m.Annotations[ichorv1alpha1.RemoveRebootAnnotation] != "true" || !m.Spec.ForceRemove {
		t.Fatalf("the removal must set allow-delete, remove-reboot and forceRemove: %v %v", m.Annotations, m.Spec.ForceRemove)
	}
	select {
	case err := <-done:
		t.Fatalf("--wait returned before the machine was gone: %v\n%s%s", err, out.String(), errOut.String())
	default:
	}
	m.Finalizers = nil
	must(t, k8s.Update(ctx, m))
	if err := <-done; err != nil {
		t.Fatalf("node remove --wait: %v\n%s%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "machine w-1 removed") {
		t.Fatalf("--wait must report the removal:\n%s", out.String())
	}
	err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w-1"}, &ichorv1alpha1.TalosMachine{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the machine still exists: %v", err)
	}
	if !strings.Contains(errOut.String(), "NOT wiped") {
		t.Fatalf("--force must warn that the node is not wiped:\n%s", errOut.String())
	}
}
