package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The skeleton is tested against the real API server: the status writes, the
// conflicts between two controllers and the pause are the API server's.
var k8s client.Client

const ns = "default"

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, func(_ context.Context, s *testenv.Suite) (func(), error) {
		k8s = s.Env.Client

		return nil, nil
	}))
}

func storage(name, clusterName string) *ichorv1alpha1.TalosStorage {
	return &ichorv1alpha1.TalosStorage{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       ichorv1alpha1.TalosStorageSpec{ClusterName: clusterName, Preset: ichorv1alpha1.StoragePresetLonghornV1},
	}
}

func req(o client.Object) ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}
}

// conditionWriter is a controller on the skeleton that sets one condition
// to a counter and owns one status field.
func conditionWriter(condType string, n *int, own bool) *Controller[*ichorv1alpha1.TalosStorage] {
	c := &Controller[*ichorv1alpha1.TalosStorage]{
		Name: "writer-" + condType, Client: k8s, New: func() *ichorv1alpha1.TalosStorage { return &ichorv1alpha1.TalosStorage{} },
		Owned: []string{condType},
		Phases: []Phase[*ichorv1alpha1.TalosStorage]{func(_ context.Context, s *Scope[*ichorv1alpha1.TalosStorage]) (ctrl.Result, error) {
			*n++
			apimeta.SetStatusCondition(&s.Object.Status.Conditions, metav1.Condition{
				Type: condType, Status: metav1.ConditionTrue, Reason: "Counted", Message: fmt.Sprint(*n),
			})

			return ctrl.Result{}, nil
		}},
	}
	if own {
		c.Primary = true
	}

	return c
}

// TestSkeleton_TwoOwnersNeverOverwrite: two controllers that write different
// conditions of one object, at the same time and many times over, each keep
// their own: the status write merges only what its controller owns onto the
// object as the API server has it. A write of the whole list (the merge patch
// of before) loses one of them.
func TestSkeleton_TwoOwnersNeverOverwrite(t *testing.T) {
	ctx := context.Background()
	st := storage("two-owners", "none")
	testenv.Must(t, k8s.Create(ctx, st))

	var na, nb int

	a, b := conditionWriter("A", &na, true), conditionWriter("B", &nb, false)

	var wg sync.WaitGroup

	errs := make(chan error, 2)

	for _, c := range []*Controller[*ichorv1alpha1.TalosStorage]{a, b} {
		wg.Add(1)

		go func() {
			defer wg.Done()

			for range 20 {
				if _, err := c.Reconcile(ctx, req(st)); err != nil {
					errs <- err

					return
				}
			}
		}()
	}

	wg.Wait()
	close(errs)

	for err := range errs {
		t.Fatal(err)
	}

	got := &ichorv1alpha1.TalosStorage{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), got))

	ca := apimeta.FindStatusCondition(got.Status.Conditions, "A")
	cb := apimeta.FindStatusCondition(got.Status.Conditions, "B")

	if ca == nil || cb == nil || ca.Message != "20" || cb.Message != "20" {
		t.Fatalf("each controller's last condition must stand: A %+v, B %+v", ca, cb)
	}

	if ca.ObservedGeneration != got.Generation || got.Status.ObservedGeneration != got.Generation {
		t.Errorf("observedGeneration: condition %d, status %d, generation %d", ca.ObservedGeneration, got.Status.ObservedGeneration, got.Generation)
	}
}

// TestSkeleton_ForeignConditionUntouched: a condition of a type the
// controller does not own is never written, even when a phase sets it.
func TestSkeleton_ForeignConditionUntouched(t *testing.T) {
	ctx := context.Background()
	st := storage("foreign", "none")
	testenv.Must(t, k8s.Create(ctx, st))

	var n int

	c := conditionWriter("Mine", &n, false)
	c.Phases = append(c.Phases, func(_ context.Context, s *Scope[*ichorv1alpha1.TalosStorage]) (ctrl.Result, error) {
		apimeta.SetStatusCondition(&s.Object.Status.Conditions, metav1.Condition{Type: "NotMine", Status: metav1.ConditionTrue, Reason: "Stray"})

		return ctrl.Result{}, nil
	})

	_, err := c.Reconcile(ctx, req(st))
	testenv.Must(t, err)

	got := &ichorv1alpha1.TalosStorage{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), got))

	if apimeta.FindStatusCondition(got.Status.Conditions, "NotMine") != nil || apimeta.FindStatusCondition(got.Status.Conditions, "Mine") == nil {
		t.Fatalf("conditions %+v: want Mine and not NotMine", got.Status.Conditions)
	}
}

// TestSkeleton_ObservedGenerationOnSuccessOnly: a failed phase writes its
// conditions but leaves status.observedGeneration where it was.
func TestSkeleton_ObservedGenerationOnSuccessOnly(t *testing.T) {
	ctx := context.Background()
	st := storage("observed", "none")
	testenv.Must(t, k8s.Create(ctx, st))

	fail := errors.New("the node does not answer")
	c := &Controller[*ichorv1alpha1.TalosStorage]{
		Name: "observed", Client: k8s, New: func() *ichorv1alpha1.TalosStorage { return &ichorv1alpha1.TalosStorage{} },
		Owned: []string{ichorv1alpha1.ReadyCondition}, Primary: true,
		Phases: []Phase[*ichorv1alpha1.TalosStorage]{func(_ context.Context, s *Scope[*ichorv1alpha1.TalosStorage]) (ctrl.Result, error) {
			apimeta.SetStatusCondition(&s.Object.Status.Conditions, metav1.Condition{
				Type: ichorv1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: ichorv1alpha1.FailedReason, Message: fail.Error(),
			})

			return ctrl.Result{}, fail
		}},
	}

	if _, err := c.Reconcile(ctx, req(st)); !errors.Is(err, fail) {
		t.Fatalf("Reconcile returned %v, want the phase's error", err)
	}

	got := &ichorv1alpha1.TalosStorage{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), got))

	if got.Status.ObservedGeneration != 0 {
		t.Errorf("observedGeneration %d after a failed reconcile, want 0", got.Status.ObservedGeneration)
	}

	if r := apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.ReadyCondition); r == nil || r.Message != fail.Error() {
		t.Errorf("Ready %+v: the failure is not recorded", r)
	}

	// The neighbour: the same reconcile succeeding moves it.
	c.Phases = nil

	_, err := c.Reconcile(ctx, req(st))
	testenv.Must(t, err)
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), got))

	if got.Status.ObservedGeneration != got.Generation {
		t.Errorf("observedGeneration %d after a successful reconcile, want %d", got.Status.ObservedGeneration, got.Generation)
	}
}

// TestPausedStops_Skeleton: while the object's TalosCluster has
// spec.paused, no phase runs and the Paused condition says why; unpausing
// runs the phases again and removes it.
func TestPausedStops_Skeleton(t *testing.T) {
	ctx := context.Background()
	c := testenv.TalosCluster(ns, "paused")
	c.Spec.Paused = true
	testenv.Must(t, k8s.Create(ctx, c))

	st := storage("of-paused", c.Name)
	testenv.Must(t, k8s.Create(ctx, st))

	var n int

	w := conditionWriter("Worked", &n, true)

	_, err := w.Reconcile(ctx, req(st))
	testenv.Must(t, err)

	got := &ichorv1alpha1.TalosStorage{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), got))

	if n != 0 {
		t.Errorf("a phase ran %d times while the cluster was paused", n)
	}

	p := apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.PausedCondition)
	if p == nil || p.Status != metav1.ConditionTrue || p.Reason != ichorv1alpha1.PausedReason {
		t.Fatalf("Paused %+v, want True", p)
	}

	c.Spec.Paused = false
	testenv.Must(t, k8s.Update(ctx, c))

	_, err = w.Reconcile(ctx, req(st))
	testenv.Must(t, err)
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), got))

	if n != 1 || apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.PausedCondition) != nil ||
		apimeta.FindStatusCondition(got.Status.Conditions, "Worked") == nil {
		t.Errorf("after unpausing: %d phase runs, conditions %+v", n, got.Status.Conditions)
	}
}

// TestSkeleton_Finalizer: the finalizer is added before the phases and
// removed once Finalize succeeds on a deleted object; a Finalize that asks
// to wait keeps it.
func TestSkeleton_Finalizer(t *testing.T) {
	ctx := context.Background()
	st := storage("finalized", "none")
	testenv.Must(t, k8s.Create(ctx, st))

	const fin = "ichor.maesh.dev/test"

	ready := false
	c := &Controller[*ichorv1alpha1.TalosStorage]{
		Name: "finalizer", Client: k8s, New: func() *ichorv1alpha1.TalosStorage { return &ichorv1alpha1.TalosStorage{} },
		Finalizer: fin,
		Finalize: func(context.Context, *Scope[*ichorv1alpha1.TalosStorage]) (ctrl.Result, error) {
			if !ready {
				return ctrl.Result{RequeueAfter: 1}, nil
			}

			return ctrl.Result{}, nil
		},
	}

	_, err := c.Reconcile(ctx, req(st))
	testenv.Must(t, err)

	got := &ichorv1alpha1.TalosStorage{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), got))

	if len(got.Finalizers) != 1 || got.Finalizers[0] != fin {
		t.Fatalf("finalizers %v, want %s", got.Finalizers, fin)
	}

	testenv.Must(t, k8s.Delete(ctx, got))

	_, err = c.Reconcile(ctx, req(st))
	testenv.Must(t, err)
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), got))

	if len(got.Finalizers) != 1 {
		t.Fatalf("the finalizer went before Finalize was done: %v", got.Finalizers)
	}

	ready = true

	_, err = c.Reconcile(ctx, req(st))
	testenv.Must(t, err)

	if err := k8s.Get(ctx, client.ObjectKeyFromObject(st), got); err == nil {
		t.Fatalf("the object is still there with finalizers %v", got.Finalizers)
	}
}

// TestSkeleton_PersistIsStrict: Persist, the write before a side effect,
// fails when the object changed since the reconcile read it (the side
// effect is then not made), and nothing more of that reconcile is written;
// on an unchanged object it writes at once.
func TestSkeleton_PersistIsStrict(t *testing.T) {
	ctx := context.Background()
	st := storage("persist", "none")
	testenv.Must(t, k8s.Create(ctx, st))

	sideEffects := 0
	intervene := true
	c := &Controller[*ichorv1alpha1.TalosStorage]{
		Name: "persist", Client: k8s, New: func() *ichorv1alpha1.TalosStorage { return &ichorv1alpha1.TalosStorage{} },
		Owned: []string{"Recorded"},
		Phases: []Phase[*ichorv1alpha1.TalosStorage]{func(ctx context.Context, s *Scope[*ichorv1alpha1.TalosStorage]) (ctrl.Result, error) {
			if intervene {
				// Another writer between the read and the record.
				other := &ichorv1alpha1.TalosStorage{}
				testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(s.Object), other))
				apimeta.SetStatusCondition(&other.Status.Conditions, metav1.Condition{Type: "Other", Status: metav1.ConditionTrue, Reason: "Wrote"})
				testenv.Must(t, k8s.Status().Update(ctx, other))
			}

			apimeta.SetStatusCondition(&s.Object.Status.Conditions, metav1.Condition{Type: "Recorded", Status: metav1.ConditionTrue, Reason: "BeforeTheCall"})
			if err := s.Persist(ctx); err != nil {
				return ctrl.Result{}, err
			}

			sideEffects++

			return ctrl.Result{}, nil
		}},
	}

	if _, err := c.Reconcile(ctx, req(st)); err == nil {
		t.Fatal("Persist over a changed object succeeded")
	}

	got := &ichorv1alpha1.TalosStorage{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), got))

	if sideEffects != 0 || apimeta.FindStatusCondition(got.Status.Conditions, "Recorded") != nil {
		t.Fatalf("side effects %d, conditions %+v: a stale reconcile went on", sideEffects, got.Status.Conditions)
	}

	intervene = false

	_, err := c.Reconcile(ctx, req(st))
	testenv.Must(t, err)
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), got))

	if sideEffects != 1 || apimeta.FindStatusCondition(got.Status.Conditions, "Recorded") == nil || apimeta.FindStatusCondition(got.Status.Conditions, "Other") == nil {
		t.Fatalf("side effects %d, conditions %+v", sideEffects, got.Status.Conditions)
	}
}

// TestSkeleton_SummaryFollowsEveryOwner: Ready is no controller's to set: the
// kind's one summary function computes it from the merged conditions at each
// write, so it follows a change of either owner's condition, and a phase
// that sets Ready itself changes nothing.
func TestSkeleton_SummaryFollowsEveryOwner(t *testing.T) {
	ctx := context.Background()
	st := storage("summary", "none")
	testenv.Must(t, k8s.Create(ctx, st))

	summarize := func(o *ichorv1alpha1.TalosStorage) {
		ready := metav1.Condition{Type: ichorv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "AllGood"}
		for _, t := range []string{"A", "B"} {
			if c := apimeta.FindStatusCondition(o.Status.Conditions, t); c == nil || c.Status != metav1.ConditionTrue {
				ready = metav1.Condition{Type: ichorv1alpha1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "Waiting" + t}

				break
			}
		}

		apimeta.SetStatusCondition(&o.Status.Conditions, ready)
	}

	owner := func(condType string, status *metav1.ConditionStatus) *Controller[*ichorv1alpha1.TalosStorage] {
		return &Controller[*ichorv1alpha1.TalosStorage]{
			Name: "summary-" + condType, Client: k8s, New: func() *ichorv1alpha1.TalosStorage { return &ichorv1alpha1.TalosStorage{} },
			Owned: []string{condType}, Summarize: summarize,
			Phases: []Phase[*ichorv1alpha1.TalosStorage]{func(_ context.Context, s *Scope[*ichorv1alpha1.TalosStorage]) (ctrl.Result, error) {
				apimeta.SetStatusCondition(&s.Object.Status.Conditions, metav1.Condition{Type: condType, Status: *status, Reason: "Set"})
				// Not this controller's: ignored.
				apimeta.SetStatusCondition(&s.Object.Status.Conditions, metav1.Condition{Type: ichorv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Claimed"})

				return ctrl.Result{}, nil
			}},
		}
	}

	sa, sb := metav1.ConditionTrue, metav1.ConditionFalse
	a, b := owner("A", &sa), owner("B", &sb)

	ready := func() *metav1.Condition {
		got := &ichorv1alpha1.TalosStorage{}
		testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), got))

		return apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.ReadyCondition)
	}

	for _, step := range []struct {
		c    *Controller[*ichorv1alpha1.TalosStorage]
		set  func()
		want string
	}{
		{a, func() {}, "WaitingB"},
		{b, func() {}, "WaitingB"},
		{b, func() { sb = metav1.ConditionTrue }, "AllGood"},
		{a, func() { sa = metav1.ConditionFalse }, "WaitingA"},
	} {
		step.set()

		_, err := step.c.Reconcile(ctx, req(st))
		testenv.Must(t, err)

		if r := ready(); r == nil || r.Reason != step.want {
			t.Fatalf("after %s: Ready %+v, want reason %s", step.c.Name, r, step.want)
		}
	}
}

// staleClient reads the object as it was at a snapshot, like a cache that
// has not seen the latest write yet; everything else goes to the API server.
type staleClient struct {
	client.Client
	snapshot *ichorv1alpha1.TalosStorage
}

func (c staleClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if s, ok := obj.(*ichorv1alpha1.TalosStorage); ok {
		c.snapshot.DeepCopyInto(s)

		return nil
	}

	return c.Client.Get(ctx, key, obj, opts...)
}

// TestSkeleton_StaleReadDoesNotUndo: a reconcile that read a stale copy (the
// cache lagging behind the controller's own last write) writes what it
// changed, and leaves the owned conditions it did not touch as the API
// server holds them, instead of writing its stale copies back.
func TestSkeleton_StaleReadDoesNotUndo(t *testing.T) {
	ctx := context.Background()
	st := storage("stale-read", "none")
	testenv.Must(t, k8s.Create(ctx, st))

	snapshot := &ichorv1alpha1.TalosStorage{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), snapshot))

	set := func(typ, msg string) Phase[*ichorv1alpha1.TalosStorage] {
		return func(_ context.Context, s *Scope[*ichorv1alpha1.TalosStorage]) (ctrl.Result, error) {
			apimeta.SetStatusCondition(&s.Object.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: "Set", Message: msg})

			return ctrl.Result{}, nil
		}
	}

	c := &Controller[*ichorv1alpha1.TalosStorage]{
		Name: "stale", Client: k8s, APIReader: k8s, New: func() *ichorv1alpha1.TalosStorage { return &ichorv1alpha1.TalosStorage{} },
		Owned: []string{"A", "B"}, SkipPaused: true,
	}

	// The reconcile before: A is "new" in the API server.
	c.Phases = []Phase[*ichorv1alpha1.TalosStorage]{set("A", "new")}
	_, err := c.Reconcile(ctx, req(st))
	testenv.Must(t, err)

	// The next one reads a snapshot from before that write (A "old", as an
	// earlier write of the same generation left it), and sets B.
	snapshot.Status.Conditions = []metav1.Condition{{
		Type: "A", Status: metav1.ConditionTrue, Reason: "Set", Message: "old", LastTransitionTime: metav1.Now(), ObservedGeneration: snapshot.Generation,
	}}
	c.Client = staleClient{Client: k8s, snapshot: snapshot}
	c.Phases = []Phase[*ichorv1alpha1.TalosStorage]{set("B", "b")}
	_, err = c.Reconcile(ctx, req(st))
	testenv.Must(t, err)

	got := &ichorv1alpha1.TalosStorage{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(st), got))

	if a := apimeta.FindStatusCondition(got.Status.Conditions, "A"); a == nil || a.Message != "new" {
		t.Errorf("A = %+v, want the API server's \"new\": the stale reconcile wrote its copy back", a)
	}

	if b := apimeta.FindStatusCondition(got.Status.Conditions, "B"); b == nil || b.Message != "b" {
		t.Errorf("B = %+v, want the stale reconcile's own change \"b\"", b)
	}
}
