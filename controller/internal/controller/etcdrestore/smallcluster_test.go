package etcdrestore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// This package's world is the one small topology with three control planes
// and no worker, so the capacity check before each drain is tested here.

const rebootRPC = "/machine.MachineService/Reboot"

// cpuPod is a pod template requesting cpu, tolerating every taint.
func cpuPod(labels map[string]string, cpu string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
			}},
		},
	}
}

// fillNodes puts on cp-1 and cp-3 pods that leave them little CPU free, and
// on cp-2 a ReplicaSet's pod (a drain evicts it) that needs more than that.
func fillNodes(t *testing.T, k kubernetes.Interface) {
	t.Helper()

	ctx := t.Context()
	one := int32(1)

	for _, n := range []string{"cp-1", "cp-3"} {
		tpl := cpuPod(map[string]string{"capacity": "filler"}, "3500m")
		tpl.Spec.NodeName = n

		// The default ServiceAccount comes from kube-controller-manager a
		// moment after the namespace: until then pods are refused.
		testenv.Eventually(t, waitTimeout, "filler-"+n+" created", func() error {
			_, err := k.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "filler-" + n, Labels: tpl.Labels}, Spec: tpl.Spec,
			}, metav1.CreateOptions{})

			return err
		})
	}

	movable := cpuPod(map[string]string{"capacity": "movable"}, "2")
	movable.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "cp-2"}

	_, err := k.AppsV1().ReplicaSets(metav1.NamespaceDefault).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "movable"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: movable.Labels}, Template: movable,
		},
	}, metav1.CreateOptions{})
	testenv.Must(t, err)

	t.Cleanup(func() {
		ctx := context.Background()
		_ = k.AppsV1().ReplicaSets(metav1.NamespaceDefault).Delete(ctx, "movable", metav1.DeleteOptions{})

		for _, n := range []string{"cp-1", "cp-3"} {
			_ = k.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, "filler-"+n, metav1.DeleteOptions{})
		}
	})

	testenv.Eventually(t, waitTimeout, "the movable pod on cp-2 and the fillers placed", func() error {
		pods, err := k.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "capacity"})
		if err != nil {
			return err
		}

		placed := map[string]bool{}
		for _, p := range pods.Items {
			placed[p.Labels["capacity"]+"@"+p.Spec.NodeName] = true
		}

		if !placed["movable@cp-2"] || !placed["filler@cp-1"] || !placed["filler@cp-3"] {
			return fmt.Errorf("pods placed: %v", placed)
		}

		return nil
	})
}

// clusterEvent finds an Event about the TalosCluster with reason and a note
// containing substr.
func clusterEvent(t testing.TB, reason, substr string) error {
	t.Helper()

	var list eventsv1.EventList

	testenv.Must(t, k8s.List(context.Background(), &list, client.InNamespace(ns)))

	var seen []string

	for _, e := range list.Items {
		if e.Regarding.Kind == "TalosCluster" && e.Regarding.Name == clusterName {
			if e.Reason == reason && strings.Contains(e.Note, substr) {
				return nil
			}

			seen = append(seen, e.Reason+": "+e.Note)
		}
	}

	return errors.New("no " + reason + " Event about the cluster naming " + substr + " among " + strings.Join(seen, " | "))
}

// TestSmallClusterDrainCapacity: on three control planes and no worker, a
// reboot of cp-2 whose evicted pod does not fit on cp-1 and cp-3 stops
// before the drain (nothing cordoned, no Reboot sent) with what does not fit
// and both ways out; resumed with the override annotation, the drain goes
// on, the node reboots, and the override is a Warning Event on the cluster
// (architecture, "Topology": "three-node clusters without workers get a
// capacity check before each drain").
func TestSmallClusterDrainCapacity(t *testing.T) {
	ctx := t.Context()
	k := workload(t)

	waitLockReleased(t)
	fillNodes(t, k)

	before := emu(t, "cp-2").RPCCounts()[rebootRPC]

	testenv.Must(t, k8s.Create(ctx, &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "reboot-cp-2"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: clusterName, Type: ichorv1alpha1.OperationNode,
			Node: &ichorv1alpha1.NodeAction{MachineName: "cp-2", Action: ichorv1alpha1.NodeActionReboot},
		},
	}))

	var op *ichorv1alpha1.TalosOperation

	testenv.Eventually(t, 2*waitTimeout, "the reboot stopped before its drain", func() error {
		op = getOp(t, "reboot-cp-2")
		if op.Status.FailedStep == "" {
			return fmt.Errorf("phase %q, step %q, machines %+v", op.Status.Phase, op.Status.Step, op.Status.Machines)
		}

		return nil
	})

	for _, want := range []string{"step drain", "three control planes and no worker", "node cp-2 request", "CPU", "ichor operation resume reboot-cp-2 --override"} {
		if !strings.Contains(op.Status.FailureReason, want) {
			t.Errorf("the failure does not say %q: %s", want, op.Status.FailureReason)
		}
	}

	if !op.Status.Overridable {
		t.Error("status.overridable is false after the capacity check stopped the drain")
	}

	node, err := k.CoreV1().Nodes().Get(ctx, "cp-2", metav1.GetOptions{})
	testenv.Must(t, err)

	if node.Spec.Unschedulable {
		t.Error("cp-2 was cordoned although the capacity check stopped the drain")
	}

	if n := emu(t, "cp-2").RPCCounts()[rebootRPC]; n != before {
		t.Errorf("cp-2 got %d Reboot calls before the override, want none", n-before)
	}

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		op := getOp(t, "reboot-cp-2")
		op.Annotations = map[string]string{
			ichorv1alpha1.OverrideDrainCapacityAnnotation: "t1",
			ichorv1alpha1.ResumeAnnotation:                "t1",
		}

		return k8s.Update(ctx, op)
	}))

	testenv.Eventually(t, waitTimeout, "the resume taken", func() error {
		if op := getOp(t, "reboot-cp-2"); op.Status.FailureReason != "" {
			return errors.New("still paused: " + op.Status.FailureReason)
		}

		return nil
	})

	waitPhase(t, "reboot-cp-2", ichorv1alpha1.OperationSucceeded)

	if n := emu(t, "cp-2").RPCCounts()[rebootRPC]; n != before+1 {
		t.Errorf("cp-2 got %d Reboot calls after the override, want 1", n-before)
	}

	testenv.Eventually(t, waitTimeout, "the override recorded on the cluster", func() error {
		return clusterEvent(t, "OverrideDrainCapacity", "reboot-cp-2")
	})

	waitLockReleased(t)
}
