package testworld

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The chaos tests (issue 30) kill the controller at every step boundary of
// a piece of work: each reconcile runs in a controller process that starts,
// reconciles once and dies (ReconcileOnce, ReconcileOperationOnce), so every
// boundary between two reconciles is a point where the controller died and
// a new one had to carry on from what the API holds. RunChaos drives such a
// scenario and records the steps it went through; each test then asserts,
// from the emulator's RPC counters and the API, that the work completed,
// that no non-idempotent Talos call (Reset, Upgrade, Reboot, Bootstrap,
// EtcdRecover, Shutdown, etcd member removal) was sent twice, and that
// nothing was lost.

// ChaosStep is where a chaos scenario stands after one controller died.
type ChaosStep struct {
	// At is where each part of the work stands, by key: a machine's name to
	// its step, or "" to the operation's own stage. An empty step is not
	// recorded. A change of a key's step is a step boundary.
	At map[string]string
	// Done is true once the work completed.
	Done bool
	// Failed is why the work stopped (a paused operation's reason); the test
	// fails with it.
	Failed string
	// Wait is how long to wait before the next controller starts, when the
	// scenario waits for something else (a controller that recreates an
	// object, say); zero follows the reconcile's requeue.
	Wait time.Duration
}

// Chaos is what a chaos run went through.
type Chaos struct {
	// Deaths is how many controller processes ran one reconcile and died.
	Deaths int
	// Steps are, by ChaosStep.At's key, the steps seen, in order, each
	// change recorded once.
	Steps map[string][]string
}

// KillPoints is the number of step boundaries the controller died at: the
// steps recorded across every key.
func (c Chaos) KillPoints() int {
	n := 0
	for _, s := range c.Steps {
		n += len(s)
	}

	return n
}

// String lists the steps by key, for a failure message.
func (c Chaos) String() string {
	var b strings.Builder

	for _, k := range slices.Sorted(maps.Keys(c.Steps)) {
		name := k
		if name == "" {
			name = "operation"
		}

		fmt.Fprintf(&b, "%s: %s; ", name, strings.Join(c.Steps[k], " → "))
	}

	return strings.TrimSuffix(b.String(), "; ")
}

// chaosPoll is the pause between two controllers when the reconcile asked
// to be requeued later: the work polls something outside (a node
// rebooting, a kube-apiserver restarting), and a new controller at once
// would only find it unchanged.
const chaosPoll = 100 * time.Millisecond

// RunChaos runs the scenario until it is done: run is one controller
// process (it reconciles once and dies, returning the reconcile's result),
// observe reports where the work stands after it (it may act as a person
// would, once the work waits for one). The test fails when the work stops
// with a failure or is not done within timeout. The run is logged with its
// number of deaths and kill points.
func RunChaos(t testing.TB, timeout time.Duration, run func() ctrl.Result, observe func() ChaosStep) Chaos {
	t.Helper()

	c := Chaos{Steps: map[string][]string{}}
	deadline := time.Now().Add(timeout)

	for {
		if time.Now().After(deadline) {
			t.Fatalf("chaos: not done after %d controller deaths within %s; steps %s", c.Deaths, timeout, c)
		}

		res := run()
		c.Deaths++

		st := observe()
		for k, step := range st.At {
			if s := c.Steps[k]; step != "" && (len(s) == 0 || s[len(s)-1] != step) {
				c.Steps[k] = append(s, step)
			}
		}

		if st.Failed != "" {
			t.Fatalf("chaos: the work stopped after %d controller deaths: %s; steps %s", c.Deaths, st.Failed, c)
		}

		if st.Done {
			t.Logf("chaos: done after %d controller deaths at %d step boundaries", c.Deaths, c.KillPoints())

			return c
		}

		switch {
		case st.Wait > 0:
			time.Sleep(st.Wait)
		case res.RequeueAfter > chaosPoll:
			time.Sleep(chaosPoll)
		}
	}
}

// OperationStep is where a TalosOperation stands, for RunChaos: its stage
// under "" and each machine's step under the machine's name (as step names
// it, nil meaning MachineProgress.Step; "" leaves the machine out); done
// once it succeeded, failed once it paused at a step.
func OperationStep(op *ichorv1alpha1.TalosOperation, step func(ichorv1alpha1.MachineProgress) string) ChaosStep {
	at := map[string]string{"": op.Status.Step}

	for _, p := range op.Status.Machines {
		s := p.Step
		if step != nil {
			s = step(p)
		}

		at[p.Name] = s
	}

	st := ChaosStep{At: at, Done: op.Status.Phase == ichorv1alpha1.OperationSucceeded}
	if op.Status.FailedStep != "" {
		st.Failed = op.Status.FailureReason
	}

	return st
}
