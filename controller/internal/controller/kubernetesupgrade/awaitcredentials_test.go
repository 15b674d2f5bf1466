package kubernetesupgrade_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/controller/internal/controller/operation"
	"github.com/maeshinshin/ichor/controller/internal/selftrust"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestCARotationAwaitsCredentials (issue 24): in a one-control-plane cluster
// that the controller runs in (its own Node is cp-1's), a CA rotation, once
// every node accepts the new CAs, waits in AwaitingCredentials with a message
// that names the command that hands them over; it does not move on while it
// waits, and the old credentials keep working. After the hand-over, ahead of
// the switch, the controller's own Kubernetes client (a client of the old CA
// from a CA file, as in a pod) trusts the new CA too: when the
// kube-apiserver presents the new CA's certificate, a client of the CA file
// alone is refused, the controller's is not.
func TestCARotationAwaitsCredentials(t *testing.T) {
	machines := []string{"cp-1"}
	ec := newCluster(t, "127.0.119.0/24", machines)
	ctx := context.Background()

	// The controller's own client, as in a pod: the CA from a file (the
	// ServiceAccount volume's ca.crt, the old CA).
	oldKube := ec.restConfig(t)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	testenv.Must(t, os.WriteFile(caFile, oldKube.CAData, 0o600))

	inPod := rest.CopyConfig(oldKube)
	inPod.CAData, inPod.CAFile = nil, caFile

	own, trust, err := selftrust.Wrap(inPod, filepath.Join(dir, "self-trust.pem"))
	testenv.Must(t, err)

	m := &ichorv1alpha1.TalosMachine{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ec.ns, Name: "cp-1"}, m))

	if m.Status.NodeName == "" {
		t.Fatal("cp-1 has no Node name in status")
	}

	stopOperations()
	testenv.Must(t, startOperations(ctx, func(r *operation.Reconciler) { r.OwnNode, r.SelfTrust = m.Status.NodeName, trust }))
	t.Cleanup(func() {
		stopOperations()
		testenv.Must(t, startOperations(context.Background()))
	})

	oldTalos := talosCredsOf(t, ec.bundle, ec.bundle.Certs.OS.Crt)

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ec.ns, Name: "rotate-ca"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: ec.name, Type: ichorv1alpha1.OperationCARotation},
	}
	testenv.Must(t, k8s.Create(ctx, op))
	// The test stops before the end: the operation goes with it, so that the
	// suite's reconciler does not go on with a world that is gone.
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), op) })

	got := ec.waitPhase(t, op.Name, ichorv1alpha1.OperationAwaitingCredentials)

	want := "`ichor cluster rotate-ca " + ec.name + " --operation " + op.Name + "`"
	if c := apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.ReadyCondition); c == nil ||
		c.Reason != ichorv1alpha1.AwaitingCredentialsReason || !strings.Contains(c.Message, want) {
		t.Fatalf("Ready while awaiting the credentials: %+v; want reason %s naming %s", c, ichorv1alpha1.AwaitingCredentialsReason, want)
	}

	if st := stageOf(got, "credentials"); st == nil || !strings.Contains(st.Message, want) {
		t.Fatalf("the credentials stage while waiting: %+v", st)
	}

	// A while later it still waits, the earlier stages as they were: nothing
	// but the hand-over moves it on.
	seq := got.Status.ProgressSequence

	time.Sleep(3 * time.Second)

	got = ec.getOp(t, op.Name)
	if got.Status.Phase != ichorv1alpha1.OperationAwaitingCredentials || got.Status.Step != "credentials" || got.Status.ProgressSequence != seq {
		t.Fatalf("the rotation went on without the hand-over: phase %s, step %s, progress %d → %d",
			got.Status.Phase, got.Status.Step, seq, got.Status.ProgressSequence)
	}

	if err := oldTalos.works(t, ec, "cp-1"); err != nil {
		t.Fatalf("the old talosconfig fails while the rotation waits: %v", err)
	}

	testenv.Must(t, kubeWorks(oldKube))
	testenv.Must(t, kubeWorks(own))

	newTalos, newKube := handOver(t, ec, op.Name)

	// The moment the switch starts, the controller's own client trusts the
	// new Kubernetes CA (it was added before the stage was recorded).
	newCA := newKube.CAData

	testenv.Eventually(t, waitTimeout, "the issue stage started", func() error {
		got = ec.getOp(t, op.Name)
		if got.Status.FailedStep != "" {
			t.Fatalf("the rotation paused: %s", got.Status.FailureReason)
		}

		if slices.Index([]string{"prepare", "accept", "credentials"}, got.Status.Step) >= 0 {
			return fmt.Errorf("step %s", got.Status.Step)
		}

		return nil
	})

	if !trust.Trusts(newCA) {
		t.Fatalf("at stage %s the controller's own client does not trust the new Kubernetes CA", got.Status.Step)
	}

	if st := stageOf(got, "credentials"); st == nil || !strings.Contains(st.Message, "its own Kubernetes client trusts the new Kubernetes CA") {
		t.Fatalf("the credentials stage does not say the controller's client trusts the new CA: %+v", st)
	}

	// Once the kube-apiserver presents the new CA's certificate, a client
	// of the old CA file alone is refused, the controller's own is not.
	testenv.Eventually(t, opTimeout, "the issue stage done", func() error {
		got = ec.getOp(t, op.Name)
		if got.Status.FailedStep != "" {
			t.Fatalf("the rotation paused: %s", got.Status.FailureReason)
		}

		if st := stageOf(got, "issue"); st == nil || st.Phase != ichorv1alpha1.StageDone {
			return fmt.Errorf("step %s, stages %+v", got.Status.Step, got.Status.Stages)
		}

		return nil
	})

	testenv.Eventually(t, waitTimeout, "the old CA file alone refused, the controller's client in", func() error {
		if err := kubeWorks(inPod); err == nil || !strings.Contains(err.Error(), "certificate") {
			return fmt.Errorf("a client of the old CA file alone was not refused for its certificate: %w", err)
		}

		if err := kubeWorks(own); err != nil {
			return fmt.Errorf("the controller's own client: %w", err)
		}

		return nil
	})

	if err := newTalos.works(t, ec, "cp-1"); err != nil {
		t.Fatalf("the handed-over talosconfig after the switch: %v", err)
	}
}

// stageOf is the named stage of op's status, nil when there is none.
func stageOf(op *ichorv1alpha1.TalosOperation, name string) *ichorv1alpha1.OperationStage {
	for i := range op.Status.Stages {
		if op.Status.Stages[i].Name == name {
			return &op.Status.Stages[i]
		}
	}

	return nil
}
