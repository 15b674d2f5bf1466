package machinereclaim

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/reclaim"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

const resetRPC = "/machine.MachineService/Reset"

// newReclaim creates the credential Secret and a MachineReclaim for machine name.
func newReclaim(t *testing.T, name, machine string, mutate ...func(*ichorv1alpha1.MachineReclaim)) *ichorv1alpha1.MachineReclaim {
	t.Helper()

	em, err := world.Machine(machine)
	testenv.Must(t, err)

	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-talosconfig"},
		Type:       ichorv1alpha1.ForeignTalosconfigSecretType,
		Data:       map[string][]byte{reclaim.TalosconfigKey: foreignTalosconfig()},
	}
	testenv.Must(t, k8s.Create(context.Background(), sec))

	mr := &ichorv1alpha1.MachineReclaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.MachineReclaimSpec{
			Address:        em.IP(),
			CredentialsRef: ichorv1alpha1.SecretReference{Name: sec.Name},
		},
	}
	for _, m := range mutate {
		m(mr)
	}

	testenv.Must(t, k8s.Create(context.Background(), mr))

	return mr
}

func getReclaim(t testing.TB, name string) *ichorv1alpha1.MachineReclaim {
	t.Helper()

	mr := &ichorv1alpha1.MachineReclaim{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, mr))

	return mr
}

func waitPhase(t *testing.T, name, phase string) *ichorv1alpha1.MachineReclaim {
	t.Helper()

	var mr *ichorv1alpha1.MachineReclaim

	testenv.Eventually(t, waitTimeout, name+" reaches "+phase, func() error {
		mr = getReclaim(t, name)
		if mr.Status.Phase != phase || mr.Status.ObservedGeneration != mr.Generation {
			return fmt.Errorf("phase %q (observed generation %d of %d), ready %v", mr.Status.Phase,
				mr.Status.ObservedGeneration, mr.Generation, apimeta.FindStatusCondition(mr.Status.Conditions, ichorv1alpha1.ReadyCondition))
		}

		return nil
	})

	return mr
}

func readyMessage(mr *ichorv1alpha1.MachineReclaim) string {
	if c := apimeta.FindStatusCondition(mr.Status.Conditions, ichorv1alpha1.ReadyCondition); c != nil {
		return c.Message
	}

	return ""
}

// waitObserved waits until the reconciler has looked at the reclaim's
// current generation (observedGeneration moves at the end of a successful
// reconcile): the positive marker before asserting that nothing was sent.
func waitObserved(t *testing.T, name string) {
	t.Helper()

	testenv.Eventually(t, waitTimeout, name+" observed", func() error {
		if mr := getReclaim(t, name); mr.Status.ObservedGeneration != mr.Generation {
			return fmt.Errorf("observed generation %d of %d", mr.Status.ObservedGeneration, mr.Generation)
		}

		return nil
	})
}

func setConfirm(t *testing.T, name, uuid string) {
	t.Helper()

	setConfirmAs(t, name, uuid, "")
}

// setConfirmAs types the UUID and, when user is not empty, stamps the
// confirmer annotation as the mutating webhook does on that write (this
// package runs without webhooks).
func setConfirmAs(t *testing.T, name, uuid, user string) {
	t.Helper()

	testenv.Eventually(t, waitTimeout, "typing the UUID", func() error {
		mr := getReclaim(t, name)
		mr.Spec.ConfirmUUID = uuid

		if user != "" {
			metav1.SetMetaDataAnnotation(&mr.ObjectMeta, ichorv1alpha1.ConfirmedByAnnotation, user)
		}

		return k8s.Update(context.Background(), mr)
	})
}

func secretGone(t *testing.T, name string) {
	t.Helper()

	testenv.Eventually(t, waitTimeout, "the credential Secret is deleted", func() error {
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{})
		if apierrors.IsNotFound(err) {
			return nil
		}

		return fmt.Errorf("Secret %s still exists (err %w)", name, err)
	})
}

func resets(t *testing.T, em *talosemu.Machine) int {
	t.Helper()

	return em.RPCCounts()[resetRPC]
}

// TestInspectForeignWorker runs the shared inspection against the emulated
// foreign worker with the foreign talosconfig, dialled at its address only.
func TestInspectForeignWorker(t *testing.T) {
	em, err := world.Machine("fw-1")
	testenv.Must(t, err)

	c, err := talos.DialTalosconfig(context.Background(), em.IP(), 0, foreignTalosconfig())
	testenv.Must(t, err)

	defer func() { _ = c.Close() }()

	in, err := reclaim.Inspect(context.Background(), c)
	testenv.Must(t, err)

	if in.UUID != strings.ToLower(em.UUID()) || in.UUID == "" {
		t.Errorf("UUID %q, want %q", in.UUID, em.UUID())
	}

	if in.Hostname != "fw-1" || in.MachineType != "worker" || in.ControlPlane || in.ClusterName != "theirs" {
		t.Errorf("hostname %q type %q controlPlane %v cluster %q", in.Hostname, in.MachineType, in.ControlPlane, in.ClusterName)
	}

	if in.ClusterID != foreign.Cluster.ID || in.OSCAFingerprint != reclaim.Fingerprint(foreign.Certs.OS.Crt) {
		t.Errorf("cluster ID or CA fingerprints are not the foreign bundle's: %+v", in)
	}

	if in.SystemDisk != "nvme0n1" || len(in.UserDisks) != 1 || in.UserDisks[0].Name != "vda" || !strings.Contains(in.UserDisks[0].String(), "DataDisk") {
		t.Errorf("system disk %q, user disks %v; want nvme0n1 and vda", in.SystemDisk, in.UserDisks)
	}

	if !slices.Equal(in.EncryptedVolumes, []string{"data"}) {
		t.Errorf("encrypted volumes %v, want [data]", in.EncryptedVolumes)
	}

	if refusals := reclaim.Decide(in, reclaim.Facts{}); len(refusals) != 0 {
		t.Errorf("a foreign worker is refused: %v", refusals)
	}
}

// TestInspectForeignControlPlane reads the etcd members of the foreign single
// control plane: the last member, refused unless forced.
func TestInspectForeignControlPlane(t *testing.T) {
	em, err := world.Machine("fcp-1")
	testenv.Must(t, err)

	c, err := talos.DialTalosconfig(context.Background(), em.IP(), 0, foreignTalosconfig())
	testenv.Must(t, err)

	defer func() { _ = c.Close() }()

	in, err := reclaim.Inspect(context.Background(), c)
	testenv.Must(t, err)

	if !in.ControlPlane || in.EtcdError != "" || len(in.EtcdMembers) != 1 || in.EtcdMembers[0].ID != in.LocalMemberID || !in.EtcdMembers[0].Healthy {
		t.Fatalf("etcd as inspected: controlPlane %v, error %q, members %+v, local %x", in.ControlPlane, in.EtcdError, in.EtcdMembers, in.LocalMemberID)
	}

	if in.ClusterID != foreign.Cluster.ID || in.OSCAFingerprint != reclaim.Fingerprint(foreign.Certs.OS.Crt) ||
		in.KubernetesCAFingerprint != reclaim.Fingerprint(foreign.Certs.K8s.Crt) {
		t.Errorf("cluster ID or CA fingerprints are not the foreign bundle's: %+v", in)
	}

	refusals := reclaim.Decide(in, reclaim.Facts{})
	if len(refusals) != 1 || !strings.Contains(refusals[0].Rule, "last voting etcd member") {
		t.Fatalf("want the last-member refusal, got %v", refusals)
	}

	if refusals := reclaim.Decide(in, reclaim.Facts{Force: true}); len(refusals) != 0 {
		t.Fatalf("force does not override the last member: %v", refusals)
	}
}

// TestReclaimHappyPath: inspect, wait, refuse a wrong UUID, reset once on the
// right one, Done, the credential deleted, the machine in maintenance mode
// with its installation in place, and the audit names the users the webhook
// stamped: the creator, and the writer of the UUID that was reset.
func TestReclaimHappyPath(t *testing.T) {
	em, err := world.Machine("fw-1")
	testenv.Must(t, err)
	em.ResetRPCCounts()

	mr := newReclaim(t, "happy", "fw-1", func(mr *ichorv1alpha1.MachineReclaim) {
		metav1.SetMetaDataAnnotation(&mr.ObjectMeta, ichorv1alpha1.RequestedByAnnotation, "ada")
	})
	mr = waitPhase(t, mr.Name, ichorv1alpha1.ReclaimAwaitingConfirmation)

	if mr.Status.Audit.RequestedBy != "ada" || mr.Status.Audit.RequestedAt == nil || mr.Status.Audit.ConfirmedBy != "" {
		t.Fatalf("audit before the confirmation %+v, want requested by ada and confirmed by nobody", mr.Status.Audit)
	}

	in := mr.Status.Inspection
	if in.UUID != strings.ToLower(em.UUID()) || in.Hostname != "fw-1" || in.ClusterName != "theirs" || in.ControlPlane || len(in.Refusals) != 0 {
		t.Fatalf("inspection %+v", in)
	}

	if len(in.UserDisks) != 1 || !strings.HasPrefix(in.UserDisks[0], "vda ") || !slices.Equal(in.EncryptedDisks, []string{"user volume data"}) {
		t.Fatalf("disks %v, encrypted %v", in.UserDisks, in.EncryptedDisks)
	}

	if !strings.Contains(readyMessage(mr), in.UUID) {
		t.Fatalf("the Ready message does not show the UUID to type: %q", readyMessage(mr))
	}

	setConfirmAs(t, mr.Name, "00000000-0000-0000-0000-000000000000", "wes")
	mr = waitPhase(t, mr.Name, ichorv1alpha1.ReclaimAwaitingConfirmation)

	if mr.Status.Audit.ConfirmedBy != "" {
		t.Fatalf("a wrong UUID confirmed nothing, but the audit names %q", mr.Status.Audit.ConfirmedBy)
	}

	if !strings.Contains(readyMessage(mr), "is not the machine's UUID") || mr.Status.ResetRequestedAt != nil {
		t.Fatalf("a wrong UUID: ready %q, resetRequestedAt %v", readyMessage(mr), mr.Status.ResetRequestedAt)
	}

	if n := resets(t, em); n != 0 {
		t.Fatalf("a wrong UUID sent %d resets", n)
	}

	setConfirmAs(t, mr.Name, strings.ToUpper(in.UUID), "rita")
	mr = waitPhase(t, mr.Name, ichorv1alpha1.ReclaimDone)

	if mr.Status.ResetRequestedAt == nil || mr.Status.Audit.ConfirmedAt == nil {
		t.Fatalf("the reset is not recorded: %+v", mr.Status)
	}

	if a := mr.Status.Audit; a.RequestedBy != "ada" || a.ConfirmedBy != "rita" {
		t.Fatalf("audit %+v, want requested by ada and confirmed by rita", a)
	}

	secretGone(t, mr.Spec.CredentialsRef.Name)

	if n := resets(t, em); n != 1 {
		t.Fatalf("%d resets were sent, want exactly 1", n)
	}

	info := em.Info()
	if !info.Maintenance || !info.Installed {
		t.Fatalf("after the reset: maintenance %v, installed %v; want maintenance with the installation kept", info.Maintenance, info.Installed)
	}

	// Nudging the finished reclaim sends nothing more.
	setConfirm(t, mr.Name, in.UUID)
	waitObserved(t, mr.Name)

	if n := resets(t, em); n != 1 {
		t.Fatalf("%d resets after a finished reclaim was touched, want 1", n)
	}
}

// TestReclaimRefusesIchorMachine: a machine that carries a managed cluster's
// CA is refused, and typing its UUID sends nothing.
func TestReclaimRefusesIchorMachine(t *testing.T) {
	em, err := world.Machine("ichor-1")
	testenv.Must(t, err)
	em.ResetRPCCounts()

	// The Ichor machine's talosconfig: made from the managed bundle, as a
	// person who kept it could paste it.
	restore := useBundleTalosconfig(t)
	mr := newReclaim(t, "ichor", "ichor-1")

	restore()

	mr = waitPhase(t, mr.Name, ichorv1alpha1.ReclaimAwaitingConfirmation)

	if !slices.ContainsFunc(mr.Status.Inspection.Refusals, func(s string) bool {
		return strings.Contains(s, "already belongs to Ichor cluster default/prod") && strings.Contains(s, "ichor node remove")
	}) {
		t.Fatalf("refusals %v", mr.Status.Inspection.Refusals)
	}

	setConfirm(t, mr.Name, mr.Status.Inspection.UUID)
	mr = waitPhase(t, mr.Name, ichorv1alpha1.ReclaimAwaitingConfirmation)

	if !strings.Contains(readyMessage(mr), "refused") || mr.Status.ResetRequestedAt != nil || resets(t, em) != 0 {
		t.Fatalf("ready %q, resetRequestedAt %v, resets %d", readyMessage(mr), mr.Status.ResetRequestedAt, resets(t, em))
	}

	// Force does not override it.
	testenv.Eventually(t, waitTimeout, "setting force", func() error {
		mr := getReclaim(t, mr.Name)
		mr.Spec.Force = true

		return k8s.Update(context.Background(), mr)
	})

	mr = waitPhase(t, mr.Name, ichorv1alpha1.ReclaimAwaitingConfirmation)
	if mr.Status.ResetRequestedAt != nil || resets(t, em) != 0 {
		t.Fatalf("force reset an Ichor machine")
	}
}

// TestReclaimRefusesLastControlPlane: the foreign single control plane is its
// cluster's last etcd member.
func TestReclaimRefusesLastControlPlane(t *testing.T) {
	em, err := world.Machine("fcp-1")
	testenv.Must(t, err)
	em.ResetRPCCounts()

	mr := newReclaim(t, "lastcp", "fcp-1", func(mr *ichorv1alpha1.MachineReclaim) { mr.Spec.ConfirmUUID = strings.ToLower(em.UUID()) })
	mr = waitPhase(t, mr.Name, ichorv1alpha1.ReclaimAwaitingConfirmation)

	if !mr.Status.Inspection.ControlPlane || len(mr.Status.Inspection.Refusals) != 1 ||
		!strings.Contains(mr.Status.Inspection.Refusals[0], "last voting etcd member") || resets(t, em) != 0 {
		t.Fatalf("inspection %+v, resets %d", mr.Status.Inspection, resets(t, em))
	}
}

// TestResumedReconcileSendsNoSecondReset: a reclaim whose status records a
// reset (the controller stopped between recording and sending, or after
// sending) never sends one, even when everything else would allow it.
func TestResumedReconcileSendsNoSecondReset(t *testing.T) {
	em, err := world.Machine("fcp-1")
	testenv.Must(t, err)
	em.ResetRPCCounts()

	// Forced, so nothing refuses the last control plane.
	mr := newReclaim(t, "resumed", "fcp-1", func(mr *ichorv1alpha1.MachineReclaim) { mr.Spec.Force = true })
	mr = waitPhase(t, mr.Name, ichorv1alpha1.ReclaimAwaitingConfirmation)

	if len(mr.Status.Inspection.Refusals) != 0 {
		t.Fatalf("a forced reclaim is refused: %v", mr.Status.Inspection.Refusals)
	}

	// What a controller that stopped right after recording the reset leaves.
	testenv.Eventually(t, waitTimeout, "recording a reset", func() error {
		mr := getReclaim(t, "resumed")
		now := metav1.Now()
		mr.Status.Phase = ichorv1alpha1.ReclaimResetting
		mr.Status.ResetRequestedAt = &now

		return k8s.Status().Update(context.Background(), mr)
	})

	setConfirm(t, mr.Name, mr.Status.Inspection.UUID)
	waitObserved(t, mr.Name)

	mr = getReclaim(t, mr.Name)
	if n := resets(t, em); n != 0 || mr.Status.Phase != ichorv1alpha1.ReclaimResetting {
		t.Fatalf("%d resets sent, phase %s; want none, still Resetting", n, mr.Status.Phase)
	}
}

// TestReclaimExpires: the TTL runs out while the reclaim waits; the
// credential is deleted.
func TestReclaimExpires(t *testing.T) {
	mr := newReclaim(t, "expires", "fcp-1", func(mr *ichorv1alpha1.MachineReclaim) {
		mr.Spec.TTL = &metav1.Duration{Duration: 3 * time.Second}
	})

	mr = waitPhase(t, mr.Name, ichorv1alpha1.ReclaimExpired)
	if !strings.Contains(readyMessage(mr), "TTL") {
		t.Fatalf("ready %q", readyMessage(mr))
	}

	// Created without the webhooks' stamp: the audit names nobody rather than guess.
	if a := mr.Status.Audit; a.RequestedBy != "" || a.ConfirmedBy != "" {
		t.Fatalf("audit %+v of an unstamped reclaim, want no users", a)
	}

	secretGone(t, mr.Spec.CredentialsRef.Name)
}

// TestReclaimNeverDeletesAnotherSecret: a reclaim pointed at a Secret of
// another type fails and leaves that Secret alone.
func TestReclaimNeverDeletesAnotherSecret(t *testing.T) {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "not-a-talosconfig"},
		Data:       map[string][]byte{"talosconfig": []byte("x")},
	}
	testenv.Must(t, k8s.Create(context.Background(), sec))

	mr := &ichorv1alpha1.MachineReclaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wrongtype"},
		Spec:       ichorv1alpha1.MachineReclaimSpec{Address: "127.0.91.250", CredentialsRef: ichorv1alpha1.SecretReference{Name: sec.Name}},
	}
	testenv.Must(t, k8s.Create(context.Background(), mr))

	mr = waitPhase(t, mr.Name, ichorv1alpha1.ReclaimFailed)
	if !strings.Contains(mr.Status.FailureReason, "reads only Secrets of type") {
		t.Fatalf("failure %q", mr.Status.FailureReason)
	}

	// The marker that the failing reconcile is over: a reclaim created after
	// it is answered (one worker, first in first out).
	marker := &ichorv1alpha1.MachineReclaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wrongtype-marker"},
		Spec:       ichorv1alpha1.MachineReclaimSpec{Address: "127.0.91.251", CredentialsRef: ichorv1alpha1.SecretReference{Name: "no-such-secret"}},
	}
	testenv.Must(t, k8s.Create(context.Background(), marker))
	waitPhase(t, marker.Name, ichorv1alpha1.ReclaimFailed)

	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(sec), &corev1.Secret{}))
}

// TestSweeper deletes foreign talosconfigs older than the maximum TTL, and
// nothing else.
func TestSweeper(t *testing.T) {
	ctx := context.Background()

	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stale-foreign"}, Type: ichorv1alpha1.ForeignTalosconfigSecretType, Data: map[string][]byte{"talosconfig": []byte("x")}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stale-opaque"}, Data: map[string][]byte{"a": []byte("x")}},
	} {
		testenv.Must(t, k8s.Create(ctx, s))
	}

	sw := &Sweeper{Client: k8s, Reader: k8s}

	n, err := sw.Sweep(ctx)
	testenv.Must(t, err)

	if n != 0 {
		t.Fatalf("a fresh credential was swept (%d)", n)
	}

	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stale-foreign"}, &corev1.Secret{}))

	// An hour and a bit later, as the running sweeper sees it.
	sw.Now = func() time.Time { return time.Now().Add(61 * time.Minute) }
	sw.Interval = 100 * time.Millisecond

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)

	go func() { done <- sw.Start(runCtx) }()

	secretGone(t, "stale-foreign")
	cancel()
	testenv.Must(t, <-done)

	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stale-opaque"}, &corev1.Secret{}))
}

// TestZCredentialNeverShown scans every MachineReclaim's status, every Event
// and the controller's logs for the foreign talosconfig's material. It runs
// after the others (Go runs tests in source order).
func TestZCredentialNeverShown(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString
	secrets := map[string]string{
		"client key PEM":         string(adminPEM.key),
		"client key base64":      b64(adminPEM.key),
		"client cert PEM":        string(adminPEM.crt),
		"client cert base64":     b64(adminPEM.crt),
		"CA cert base64":         b64(foreign.Certs.OS.Crt),
		"talosconfig":            string(foreignTalosconfig()),
		"talosconfig's endpoint": foreignEndpoint,
	}

	if len(logs.String()) == 0 {
		t.Fatal("no logs were captured; the check would be vacuous")
	}

	var reclaims ichorv1alpha1.MachineReclaimList
	testenv.Must(t, k8s.List(context.Background(), &reclaims, client.InNamespace(ns)))

	var evs eventsv1.EventList
	testenv.Must(t, k8s.List(context.Background(), &evs, client.InNamespace(ns)))

	if len(reclaims.Items) < 4 || len(evs.Items) == 0 {
		t.Fatalf("%d reclaims and %d events to scan; the check would be vacuous", len(reclaims.Items), len(evs.Items))
	}

	for where, text := range map[string]string{"logs": logs.String(), "status": toJSON(t, reclaims), "events": toJSON(t, evs)} {
		for what, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("the %s contain the %s", where, what)
			}
		}

		if strings.Contains(text, "PRIVATE KEY") {
			t.Errorf("the %s contain a private key", where)
		}
	}
}

func toJSON(t *testing.T, v any) string {
	t.Helper()

	out, err := json.Marshal(v)
	testenv.Must(t, err)

	return string(out)
}

// useBundleTalosconfig makes foreignTalosconfig return an os:admin talosconfig
// of the managed cluster until the returned function is called.
func useBundleTalosconfig(t *testing.T) func() {
	t.Helper()

	saved, savedAdmin := foreign, adminPEM
	admin, err := managed.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	testenv.Must(t, err)

	foreign = managed
	adminPEM.crt, adminPEM.key = admin.Crt, admin.Key

	return func() { foreign, adminPEM = saved, savedAdmin }
}
