package testenv

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// WaitTimeout bounds a wait when a test gives none. It is generous on
// purpose: the tests run on loaded 2-core machines, where an API server, an
// etcd and the emulated nodes share the CPU with the compiler.
const WaitTimeout = 150 * time.Second

// pollInterval is how often Eventually asks again.
const pollInterval = 100 * time.Millisecond

// Eventually polls cond until it returns nil, and fails the test with what
// and cond's last error when timeout passes first (zero means WaitTimeout).
// It is the one wait of Ichor's tests: a test that must show something did
// not happen waits first for a positive marker that comes after it (an
// Event, an observedGeneration, an RPC count on a sibling), never a sleep.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	every(t, timeout, pollInterval, what, cond)
}

// EventuallyEvery is EventuallyOK polling every interval, for conditions
// that are costly to ask (a CLI run, a kubectl call) on a busy machine.
func EventuallyEvery(t testing.TB, timeout, interval time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()
	every(t, timeout, interval, what, func() error {
		if ok, why := cond(); !ok {
			return errors.New(why)
		}

		return nil
	})
}

func every(t testing.TB, timeout, interval time.Duration, what string, cond func() error) {
	t.Helper()

	if timeout <= 0 {
		timeout = WaitTimeout
	}

	deadline := time.Now().Add(timeout)

	for {
		err := cond()
		if err == nil {
			return
		}

		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}

		time.Sleep(interval)
	}
}

// Must fails the test at once on a non-nil error.
func Must(t testing.TB, err error) {
	t.Helper()

	if err != nil {
		t.Fatal(err)
	}
}

// EventuallyOK is Eventually for a condition that says why it is not met
// yet: cond returns ok and, when not ok, the reason the failure names.
func EventuallyOK(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, why string)) {
	t.Helper()

	Eventually(t, timeout, what, func() error {
		if ok, why := cond(); !ok {
			return errors.New(why)
		}

		return nil
	})
}

// Holds turns a yes/no condition into Eventually's form.
func Holds(cond func() bool) func() error {
	return func() error {
		if !cond() {
			return errors.New("not yet")
		}

		return nil
	}
}

// SetClusterPaused sets spec.paused of the TalosCluster namespace/name
// through c, retrying on a conflict (the controllers write the cluster too).
func SetClusterPaused(t testing.TB, c client.Client, namespace, name string, paused bool) {
	t.Helper()

	Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tc := &ichorv1alpha1.TalosCluster{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, tc); err != nil {
			return err
		}

		tc.Spec.Paused = paused

		return c.Update(context.Background(), tc)
	}))
}

// TalosCluster is a valid cluster for tests that need one to exist: Talos
// v1.14.1 and Kubernetes 1.37.2, one unschedulable control plane at a VIP,
// Cilium, its bundle Secret named <name>-secrets (which need not exist).
func TalosCluster(namespace, name string) *ichorv1alpha1.TalosCluster {
	schedulable := false

	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: "1.37.2",
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.0.0.10"},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: name + "-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: &schedulable},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
		},
	}
}

// UpdateStatus writes a status onto the object as the API server holds it:
// it reads obj again, lets set change the fresh copy's status, and updates
// the status subresource, again when a controller wrote in between (every
// Ichor kind has a controller writing its status as soon as it exists).
func UpdateStatus[T client.Object](t testing.TB, c client.Client, obj T, set func(cur T)) {
	t.Helper()

	Must(t, retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, ok := obj.DeepCopyObject().(T)
		if !ok {
			return fmt.Errorf("cannot copy %T", obj)
		}

		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}

		set(cur)

		if err := c.Status().Update(context.Background(), cur); err != nil {
			return err
		}

		// The caller's object is what was written.
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(cur).Elem())

		return nil
	}))
}
