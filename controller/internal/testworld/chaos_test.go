package testworld

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// TestRunChaosRecordsEachBoundaryOnce: a step seen by several controllers
// in a row is one boundary; each key keeps its own order; the run ends at
// Done with every death counted.
func TestRunChaosRecordsEachBoundaryOnce(t *testing.T) {
	script := []ChaosStep{
		{At: map[string]string{"": "drain", "cp-1": "drain"}},
		{At: map[string]string{"": "drain", "cp-1": "drain"}},
		{At: map[string]string{"": "upgrade", "cp-1": "upgrade", "w-1": ""}},
		{At: map[string]string{"": "upgrade", "cp-1": "done", "w-1": "drain"}},
		{At: map[string]string{"": "finish", "cp-1": "done", "w-1": "done"}, Done: true},
	}
	runs := 0
	c := RunChaos(t, time.Minute, func() ctrl.Result { runs++; return ctrl.Result{} }, func() ChaosStep { return script[runs-1] })

	if c.Deaths != len(script) || runs != len(script) {
		t.Errorf("%d deaths, %d runs, want %d each", c.Deaths, runs, len(script))
	}

	want := map[string][]string{"": {"drain", "upgrade", "finish"}, "cp-1": {"drain", "upgrade", "done"}, "w-1": {"drain", "done"}}
	for k, s := range want {
		if !slices.Equal(c.Steps[k], s) {
			t.Errorf("steps of %q: %v, want %v", k, c.Steps[k], s)
		}
	}

	if len(c.Steps) != len(want) || c.KillPoints() != 8 {
		t.Errorf("steps %s: %d kill points, want 8", c, c.KillPoints())
	}
}

// fatalT records the first Fatalf and ends its goroutine, as testing.T does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}

func (f *fatalT) Logf(string, ...any) {}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fails runs RunChaos in its own goroutine and returns its Fatalf message.
func fails(timeout time.Duration, observe func() ChaosStep) string {
	f := &fatalT{}
	done := make(chan struct{})

	go func() {
		defer close(done)

		RunChaos(f, timeout, func() ctrl.Result { return ctrl.Result{} }, observe)
	}()
	<-done

	return f.msg
}

// TestRunChaosFailsWhenTheWorkStops: a paused operation fails the test with
// its reason and the steps so far.
func TestRunChaosFailsWhenTheWorkStops(t *testing.T) {
	n := 0
	msg := fails(time.Minute, func() ChaosStep {
		n++
		if n < 3 {
			return ChaosStep{At: map[string]string{"cp-1": fmt.Sprint("step-", n)}}
		}

		return ChaosStep{Failed: "etcd lost quorum"}
	})

	for _, want := range []string{"after 3 controller deaths", "etcd lost quorum", "cp-1: step-1 → step-2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure %q does not say %q", msg, want)
		}
	}
}

// TestRunChaosFailsWhenNeverDone: work that never completes fails the test
// at the timeout.
func TestRunChaosFailsWhenNeverDone(t *testing.T) {
	msg := fails(50*time.Millisecond, func() ChaosStep { return ChaosStep{Wait: 10 * time.Millisecond} })
	if !strings.Contains(msg, "not done after") {
		t.Errorf("failure %q", msg)
	}
}
