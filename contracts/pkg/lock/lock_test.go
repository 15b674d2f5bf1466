package lock_test

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/maeshinshin/ichor/contracts/pkg/lock"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func lease(holder string, renewed time.Time, seconds int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	if holder != "" {
		l.Spec.HolderIdentity = &holder
		l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
		l.Spec.LeaseDurationSeconds = &seconds
	}

	return l
}

func TestDecide(t *testing.T) {
	t.Parallel()

	a := lock.OperationIdentity("ns", "upgrade-1")
	b := lock.OperationIdentity("ns", "reboot-1")

	for _, tc := range []struct {
		name     string
		lease    *coordinationv1.Lease
		now      time.Time
		liveness lock.Liveness
		want     lock.Decision
	}{
		{"free", lease("", time.Time{}, 0), t0, lock.Unknown, lock.Decision{Take: true}},
		{"own lock renews", lease(a, t0, 60), t0.Add(time.Hour), lock.Unknown, lock.Decision{Take: true, Renew: true}},
		{"fresh holder waits", lease(b, t0, 60), t0.Add(59 * time.Second), lock.Unknown, lock.Decision{}},
		{"expired holder taken over", lease(b, t0, 60), t0.Add(60 * time.Second), lock.Unknown, lock.Decision{Take: true}},
		{"inactive holder taken over before expiry", lease(b, t0, 60), t0.Add(time.Second), lock.Inactive, lock.Decision{Take: true}},
		{"active holder kept after expiry", lease(b, t0, 60), t0.Add(time.Hour), lock.Active, lock.Decision{}},
		{"no renew time counts as expired", &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &b}}, t0, lock.Unknown, lock.Decision{Take: true}},
	} {
		if got := lock.Decide(tc.lease, a, tc.now, tc.liveness); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestParseIdentity(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		id   string
		kind string
		obj  types.NamespacedName
		ok   bool
	}{
		{lock.OperationIdentity("team-a", "up-1"), lock.KindOperation, types.NamespacedName{Namespace: "team-a", Name: "up-1"}, true},
		{lock.MachineIdentity("team-a", "cp-4"), lock.KindMachine, types.NamespacedName{Namespace: "team-a", Name: "cp-4"}, true},
		{lock.CNIHelmIdentity, lock.KindCNIHelm, types.NamespacedName{}, true},
		{"ichor-controller/op/a", "", types.NamespacedName{}, false},
		{"ichor-controller/job/a/b", "", types.NamespacedName{}, false},
		{"someone-else", "", types.NamespacedName{}, false},
	} {
		kind, obj, ok := lock.ParseIdentity(tc.id)
		if kind != tc.kind || obj != tc.obj || ok != tc.ok {
			t.Errorf("ParseIdentity(%q) = %q %v %v", tc.id, kind, obj, ok)
		}
	}

	if got := lock.OperationIdentity("ns", "x"); got != "ichor-controller/op/ns/x" {
		t.Errorf("OperationIdentity = %q", got)
	}
}

func TestLeaseName(t *testing.T) {
	t.Parallel()

	short := lock.LeaseName(types.NamespacedName{Namespace: "team-a", Name: "prod.eu"})
	if short != "ichor-lock.team-a.prod.eu" {
		t.Errorf("LeaseName = %q", short)
	}

	long := types.NamespacedName{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("c", 253)}
	other := types.NamespacedName{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("c", 252) + "d"}

	n1, n2 := lock.LeaseName(long), lock.LeaseName(other)
	if n1 == n2 {
		t.Error("two long cluster names share a Lease")
	}

	for _, n := range []string{short, n1, n2} {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("%q: %v", n, errs)
		}
	}
}
