package etcdbackup

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// killer kills the controller at the given step boundaries of one backup's
// attempts, each once and in order (the reconciler's killPoint hook: the
// reconcile ends there and writes nothing after it, as a process that dies
// there does; the next reconcile starts afresh from the API server).
type killer struct {
	backup string

	mu     sync.Mutex
	points []string
	killed []string
	at     []time.Time
}

func (k *killer) kill(backup, step string) bool {
	if backup != k.backup {
		return false
	}

	k.mu.Lock()
	defer k.mu.Unlock()

	if len(k.killed) == len(k.points) || step != k.points[len(k.killed)] {
		return false
	}

	k.killed = append(k.killed, step)
	k.at = append(k.at, time.Now())

	return true
}

func (k *killer) done() ([]string, []time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()

	return slices.Clone(k.killed), slices.Clone(k.at)
}

// arm installs k in the manager's reconciler until the test ends.
func arm(t *testing.T, k *killer) {
	t.Helper()

	f := k.kill
	reconciler.killPoint.Store(&f)
	t.Cleanup(func() { reconciler.killPoint.Store(nil) })
}

// Rule (chaos): a requested snapshot whose controller is killed at every
// step boundary of the attempt in turn (recorded, store checked, snapshot
// read, verified, encrypted, uploaded) is still taken: the request is
// handled once it succeeds, Ready says SnapshotStored, every object in the
// store is listed in status (the one uploaded before the last kill
// included, unless the retry wrote the same key: same second, same etcd
// revision) and each is a verified snapshot that decrypts with the
// backup's identity.
func TestBackupChaosRequested(t *testing.T) {
	const name = "chaos"

	k := &killer{backup: name, points: []string{stepRecorded, stepStoreChecked, stepSnapshotRead, stepVerified, stepEncrypted, stepUploaded}}
	arm(t, k)

	testenv.Must(t, k8s.Create(context.Background(), newBackup(name)))
	request(t, name, "t1")

	b := handled(t, name, "t1")

	killed, _ := k.done()
	if !slices.Equal(killed, k.points) {
		t.Fatalf("the controller was killed at %v, want every step boundary %v", killed, k.points)
	}

	t.Logf("chaos: done after %d controller deaths at %d step boundaries", len(killed), len(k.points))

	if c := condition(b, ichorv1alpha1.ReadyCondition); c.Status != metav1.ConditionTrue || c.Reason != ichorv1alpha1.SnapshotStoredReason {
		t.Fatalf("Ready after the kills: %+v (last failure %q)", c, b.Status.LastFailure)
	}

	if b.Status.LastSuccessfulTime == nil || b.Status.LastFailureTime != nil {
		t.Fatalf("last success %v, last failure %v %q: a killed attempt is neither", b.Status.LastSuccessfulTime, b.Status.LastFailureTime, b.Status.LastFailure)
	}

	// Retention lists the store after the attempt; the status written with
	// the success may precede that list by one reconcile.
	b = waitBackup(t, name, "status lists every stored snapshot", func(b *ichorv1alpha1.TalosEtcdBackup) (bool, string) {
		listed := make([]string, 0, len(b.Status.Snapshots))
		for _, s := range b.Status.Snapshots {
			listed = append(listed, s.Name)
		}

		slices.Sort(listed)
		keys := storeKeys(t, name)

		return len(keys) > 0 && slices.Equal(listed, keys), fmt.Sprintf("status lists %v, the store holds %v", listed, keys)
	})

	for _, s := range b.Status.Snapshots {
		checkStoredSnapshot(t, s)
	}

	noSecrets(t, b)
	testenv.Must(t, k8s.Delete(context.Background(), b))
}

// Rule (chaos): a scheduled attempt whose controller is killed right after
// it was recorded is made again at once, with a SnapshotInterrupted Warning
// Event, instead of being lost until the schedule's next run (without the
// retry, the recorded start moves the next run one period on).
func TestBackupChaosScheduled(t *testing.T) {
	const (
		name   = "chaos-sched"
		period = 30 * time.Second
	)

	k := &killer{backup: name, points: []string{stepRecorded}}
	arm(t, k)

	testenv.Must(t, k8s.Create(context.Background(), newBackup(name, func(b *ichorv1alpha1.TalosEtcdBackup) {
		b.Spec.Schedule = fmt.Sprintf("@every %s", period)
	})))

	b := waitBackup(t, name, "a stored snapshot", func(b *ichorv1alpha1.TalosEtcdBackup) (bool, string) {
		return b.Status.LastSuccessfulTime != nil, fmt.Sprintf("last schedule %v, conditions %+v", b.Status.LastScheduleTime, b.Status.Conditions)
	})

	testenv.Must(t, k8s.Delete(context.Background(), b)) // no more runs

	killed, at := k.done()
	if len(killed) != 1 {
		t.Fatalf("the first scheduled attempt was not killed: %v", killed)
	}

	// The first snapshot stored is the retry, begun before the next
	// scheduled run (its time is the attempt's start).
	if len(b.Status.Snapshots) == 0 {
		t.Fatal("the success lists no snapshot")
	}

	first := b.Status.Snapshots[0].TakenAt.Time
	for _, s := range b.Status.Snapshots {
		if s.TakenAt.Before(&metav1.Time{Time: first}) {
			first = s.TakenAt.Time
		}
	}

	// Half a period: the times in status are whole seconds.
	if !first.Before(at[0].Add(period / 2)) {
		t.Errorf("the attempt after the kill at %s began at %s, not well before the next run %s later: the interrupted run waited for the schedule",
			at[0].Format(time.RFC3339Nano), first.Format(time.RFC3339), period)
	}

	var evs eventsv1.EventList
	testenv.Must(t, k8s.List(context.Background(), &evs, client.InNamespace(ns)))

	found := false

	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Reason == ichorv1alpha1.SnapshotInterruptedReason && e.Type == "Warning" {
			found = true
		}
	}

	if !found {
		t.Errorf("no Warning Event %s for %s", ichorv1alpha1.SnapshotInterruptedReason, name)
	}
}
