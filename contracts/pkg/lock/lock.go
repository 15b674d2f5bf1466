// Package lock is the cluster lock: one coordination.k8s.io/v1 Lease per
// TalosCluster, taken by every disruptive piece of work (an operation, a
// control-plane join or removal, the Cilium Helm Job) under its own identity,
// so that two of them never run together (architecture, principle 6 and
// "Upgrades").
//
// # Liveness
//
// A holder keeps the lock by calling Acquire again (each call renews it). A
// waiter takes the lock over when the holder is no longer live:
//
//   - when a Liveness check is configured and it knows the holder, its
//     answer decides: an operation that is gone, completed, or paused on a
//     failed step is Inactive, and its lease is taken over at once, however
//     recently it was renewed; an Active holder keeps the lock even if the
//     controller was down long enough for the lease to expire (the work
//     resumes from status, and a second disruptive piece of work must not
//     start in the middle of it);
//   - otherwise (no check, or the check answers Unknown) the lease decides:
//     it is live until renewTime + leaseDurationSeconds.
//
// A waiter learns the holder (Result.Holder) so that it can report
// ClusterLockHeld naming it.
package lock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultNamespace is where the Leases live: the controller's RBAC grants
// Lease rights in ichor-system only.
const DefaultNamespace = "ichor-system"

// DefaultDuration is how long a lease stays valid without renewal.
const DefaultDuration = 5 * time.Minute

// Labels on every lock Lease, naming its cluster.
const (
	LabelCluster          = "ichor.maesh.dev/cluster"
	LabelClusterNamespace = "ichor.maesh.dev/cluster-namespace"
)

const identityPrefix = "ichor-controller/"

// OperationIdentity is the identity of a TalosOperation.
func OperationIdentity(namespace, name string) string {
	return identityPrefix + "op/" + namespace + "/" + name
}

// MachineIdentity is the identity of a machine's own join or removal.
func MachineIdentity(namespace, name string) string {
	return identityPrefix + "machine/" + namespace + "/" + name
}

// CNIHelmIdentity is the identity of the Cilium Helm Job.
const CNIHelmIdentity = identityPrefix + "cni-helm"

// Identity kinds, as ParseIdentity returns them.
const (
	KindOperation = "op"
	KindMachine   = "machine"
	KindCNIHelm   = "cni-helm"
)

// ParseIdentity splits an identity into its kind and, for operations and
// machines, the object's namespace and name. ok is false for an identity
// Ichor does not issue.
func ParseIdentity(identity string) (kind string, obj types.NamespacedName, ok bool) {
	rest, found := strings.CutPrefix(identity, identityPrefix)
	if !found {
		return "", types.NamespacedName{}, false
	}

	if rest == KindCNIHelm {
		return KindCNIHelm, types.NamespacedName{}, true
	}

	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" || (parts[0] != KindOperation && parts[0] != KindMachine) {
		return "", types.NamespacedName{}, false
	}

	return parts[0], types.NamespacedName{Namespace: parts[1], Name: parts[2]}, true
}

// LeaseName is the name of a cluster's lock Lease. A namespace has no dots,
// so the name is unambiguous; a name longer than a Lease name may be is
// shortened with a hash.
func LeaseName(cluster types.NamespacedName) string {
	n := "ichor-lock." + cluster.Namespace + "." + cluster.Name
	if len(n) <= 253 {
		return n
	}

	sum := sha256.Sum256([]byte(cluster.String()))

	return n[:253-17] + "." + hex.EncodeToString(sum[:8])
}

// Liveness is what a Checker knows about a holder.
type Liveness int

// Liveness values.
const (
	// Unknown: the checker cannot tell; the lease's expiry decides.
	Unknown Liveness = iota
	// Active: the holder's work is still running (or paused by a person, not on failure).
	Active
	// Inactive: the holder is gone, completed, or paused on a failed step.
	Inactive
)

// Checker tells whether a holder's work is still active. An error stops the
// decision: nothing is taken over on a guess.
type Checker func(ctx context.Context, identity string) (Liveness, error)

// Locker takes and releases cluster locks.
type Locker struct {
	// Client reaches the API server.
	Client client.Client
	// Namespace holds the Leases; empty means DefaultNamespace.
	Namespace string
	// Duration is the lease duration; empty means DefaultDuration.
	Duration time.Duration
	// Clock is the time source; nil means the real clock.
	Clock clock.PassiveClock
	// Check decides a holder's liveness; nil leaves it to the lease's expiry.
	Check Checker
}

// Result is the outcome of Acquire.
type Result struct {
	// Acquired: the caller holds the lock (newly, by renewal or by takeover).
	Acquired bool
	// Holder is the identity that holds the lock: the caller's when acquired,
	// the one to name in ClusterLockHeld otherwise.
	Holder string
	// TakenOverFrom is the previous holder when the lock was taken over.
	TakenOverFrom string
}

// ErrConflict is returned when another writer changed the Lease between the
// read and the write; the caller retries (requeues).
var ErrConflict = errors.New("the cluster lock changed while it was being taken; retry")

func (l *Locker) namespace() string {
	if l.Namespace == "" {
		return DefaultNamespace
	}

	return l.Namespace
}

func (l *Locker) duration() time.Duration {
	if l.Duration <= 0 {
		return DefaultDuration
	}

	return l.Duration
}

func (l *Locker) now() time.Time {
	if l.Clock == nil {
		return time.Now()
	}

	return l.Clock.Now()
}

func (l *Locker) key(cluster types.NamespacedName) client.ObjectKey {
	return client.ObjectKey{Namespace: l.namespace(), Name: LeaseName(cluster)}
}

// Holder returns the identity holding a cluster's lock, or "" when nobody does
// (no Lease, or released). It does not judge liveness.
func (l *Locker) Holder(ctx context.Context, cluster types.NamespacedName) (string, error) {
	return readHolder(ctx, l.Client, l.key(cluster), cluster)
}

// Holder reads, with any reader, the identity holding a cluster's lock in
// DefaultNamespace ("" when nobody does); it does not judge liveness.
func Holder(ctx context.Context, r client.Reader, cluster types.NamespacedName) (string, error) {
	return readHolder(ctx, r, client.ObjectKey{Namespace: DefaultNamespace, Name: LeaseName(cluster)}, cluster)
}

func readHolder(ctx context.Context, r client.Reader, key client.ObjectKey, cluster types.NamespacedName) (string, error) {
	var lease coordinationv1.Lease
	if err := r.Get(ctx, key, &lease); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}

		return "", fmt.Errorf("read the cluster lock of %s: %w", cluster, err)
	}

	return holderOf(&lease), nil
}

func holderOf(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return ""
	}

	return *lease.Spec.HolderIdentity
}

// Acquire takes, renews or takes over the lock of a cluster for identity, or
// reports who holds it.
func (l *Locker) Acquire(ctx context.Context, cluster types.NamespacedName, identity string) (Result, error) {
	if identity == "" {
		return Result{}, errors.New("a cluster lock needs an identity")
	}

	now := l.now()

	var lease coordinationv1.Lease

	err := l.Client.Get(ctx, l.key(cluster), &lease)
	if apierrors.IsNotFound(err) {
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: l.namespace(),
				Name:      LeaseName(cluster),
				Labels:    map[string]string{LabelCluster: labelValue(cluster.Name), LabelClusterNamespace: cluster.Namespace},
			},
		}
		l.take(&lease, identity, now)

		if err := l.Client.Create(ctx, &lease); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return Result{}, ErrConflict
			}

			return Result{}, fmt.Errorf("create the cluster lock of %s: %w", cluster, err)
		}

		return Result{Acquired: true, Holder: identity}, nil
	}

	if err != nil {
		return Result{}, fmt.Errorf("read the cluster lock of %s: %w", cluster, err)
	}

	holder := holderOf(&lease)

	var liveness Liveness

	if holder != "" && holder != identity && l.Check != nil {
		liveness, err = l.Check(ctx, holder)
		if err != nil {
			return Result{Holder: holder}, fmt.Errorf("decide whether %s still holds the cluster lock of %s: %w", holder, cluster, err)
		}
	}

	d := Decide(&lease, identity, now, liveness)
	if !d.Take {
		return Result{Holder: holder}, nil
	}

	if d.Renew {
		lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
		lease.Spec.LeaseDurationSeconds = new(l.seconds())
	} else {
		l.take(&lease, identity, now)
	}

	if err := l.Client.Update(ctx, &lease); err != nil {
		if apierrors.IsConflict(err) {
			return Result{}, ErrConflict
		}

		return Result{}, fmt.Errorf("take the cluster lock of %s: %w", cluster, err)
	}

	res := Result{Acquired: true, Holder: identity}
	if !d.Renew && holder != "" {
		res.TakenOverFrom = holder
	}

	return res, nil
}

func (l *Locker) take(lease *coordinationv1.Lease, identity string, now time.Time) {
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
		transitions := int32(0)
		if lease.Spec.LeaseTransitions != nil {
			transitions = *lease.Spec.LeaseTransitions
		}

		lease.Spec.LeaseTransitions = new(transitions + 1)
	}

	lease.Spec.HolderIdentity = new(identity)
	lease.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
	lease.Spec.LeaseDurationSeconds = new(l.seconds())
}

// seconds is the duration in whole seconds, at least one, as a Lease holds it.
func (l *Locker) seconds() int32 {
	s := l.duration() / time.Second

	switch {
	case s < 1:
		return 1
	case s > math.MaxInt32:
		return math.MaxInt32
	default:
		return int32(s)
	}
}

// Decision is what Acquire does with an existing Lease.
type Decision struct {
	// Take: the caller gets the lock.
	Take bool
	// Renew: the caller already holds it; only the renew time moves.
	Renew bool
}

// Decide is the lock's rule, a pure function of the Lease, the caller, the
// time and what the checker knows about the current holder.
func Decide(lease *coordinationv1.Lease, identity string, now time.Time, holderLiveness Liveness) Decision {
	holder := holderOf(lease)

	switch holder {
	case identity:
		return Decision{Take: true, Renew: true}
	case "":
		return Decision{Take: true}
	}

	switch holderLiveness {
	case Active:
		return Decision{}
	case Inactive:
		return Decision{Take: true}
	default:
		return Decision{Take: Expired(lease, now)}
	}
}

// Expired reports whether a lease was not renewed within its duration. A
// lease without a renew time or duration counts as expired.
func Expired(lease *coordinationv1.Lease, now time.Time) bool {
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return true
	}

	return !now.Before(lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second))
}

// Release gives up the lock when identity holds it; it reports whether it did.
// The Lease stays, empty, keeping its transition count.
func (l *Locker) Release(ctx context.Context, cluster types.NamespacedName, identity string) (bool, error) {
	var lease coordinationv1.Lease
	if err := l.Client.Get(ctx, l.key(cluster), &lease); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}

		return false, fmt.Errorf("read the cluster lock of %s: %w", cluster, err)
	}

	if holderOf(&lease) != identity {
		return false, nil
	}

	lease.Spec.HolderIdentity = nil
	lease.Spec.AcquireTime = nil
	lease.Spec.RenewTime = nil

	if err := l.Client.Update(ctx, &lease); err != nil {
		if apierrors.IsConflict(err) {
			return false, ErrConflict
		}

		return false, fmt.Errorf("release the cluster lock of %s: %w", cluster, err)
	}

	return true, nil
}

// labelValue fits a cluster name into a label value (63 characters).
func labelValue(s string) string {
	if len(s) <= 63 {
		return s
	}

	sum := sha256.Sum256([]byte(s))

	return s[:46] + "-" + hex.EncodeToString(sum[:8])
}
