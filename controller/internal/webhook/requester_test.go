package webhook

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/controller/internal/controller/credentialrequest"
	"github.com/maeshinshin/ichor/controller/internal/controller/machinereclaim"
	"github.com/maeshinshin/ichor/tools/testenv"
)

const (
	requestedBy = ichorv1alpha1.RequestedByAnnotation
	confirmedBy = ichorv1alpha1.ConfirmedByAnnotation
)

// runReconcilers runs the credential request and reclaim reconcilers, as
// cmd/main.go does, on namespace ns only (so the other tests' objects are left
// alone), until the test ends.
func runReconcilers(t *testing.T, ns string) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		// The reconcilers' names are unique per manager; this test's managers are short-lived.
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	})
	testenv.Must(t, err)
	testenv.Must(t, (&credentialrequest.Reconciler{}).SetupWithManager(mgr))
	testenv.Must(t, (&machinereclaim.Reconciler{}).SetupWithManager(mgr))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("reconcilers' manager: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// annotation returns obj's annotation key as root reads it, and whether it is set.
func annotation(t *testing.T, obj client.Object, key string) (string, bool) {
	t.Helper()
	testenv.Must(t, root.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
	v, ok := obj.GetAnnotations()[key]
	return v, ok
}

func wantAnnotation(t *testing.T, obj client.Object, key, want string) {
	t.Helper()
	if v, ok := annotation(t, obj, key); !ok || v != want {
		t.Fatalf("%s %s: annotation %s is %q (set %v), want %q", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), key, v, ok, want)
	}
}

func wantNoAnnotation(t *testing.T, obj client.Object, key string) {
	t.Helper()
	if v, ok := annotation(t, obj, key); ok {
		t.Fatalf("%s: annotation %s is %q, want it absent", obj.GetName(), key, v)
	}
}

// Rule: a TalosCredentialRequest records who created it, as the API server
// authenticated them; the client cannot choose it or change it later, and the
// controller shows it in status.requestedBy.
func TestCredentialRequestRecordsItsRequester(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c"))) // no secrets bundle: the request is denied, as the requester
	runReconcilers(t, ns)

	tcr := &ichorv1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine",
			// A client's claim to be someone else is overwritten.
			Annotations: map[string]string{requestedBy: "ada"}},
		Spec: ichorv1alpha1.TalosCredentialRequestSpec{
			ClusterName: "c", Purpose: ichorv1alpha1.PurposeTalosconfigReader,
			PublicKey: "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n",
		},
	}
	testenv.Must(t, operator.Create(ctx, tcr))
	wantAnnotation(t, tcr, requestedBy, "otto")

	testenv.Eventually(t, 0, "status.requestedBy names the requester", func() error {
		got := &ichorv1alpha1.TalosCredentialRequest{}
		testenv.Must(t, root.Get(ctx, client.ObjectKeyFromObject(tcr), got))
		if got.Status.RequestedBy != "otto" || len(got.Status.Conditions) == 0 {
			return fmt.Errorf("status.requestedBy %q, conditions %v; want otto once answered", got.Status.RequestedBy, got.Status.Conditions)
		}
		return nil
	})

	// Not even the cluster administrator may rewrite it.
	err := update(t, root, tcr, func(r *ichorv1alpha1.TalosCredentialRequest) { r.Annotations[requestedBy] = "ada" })
	refused(t, err, "Invalid", "metadata.annotations[ichor.maesh.dev/requested-by]", `"otto"`, `cannot be changed to "ada"`)
	err = update(t, root, tcr, func(r *ichorv1alpha1.TalosCredentialRequest) { delete(r.Annotations, requestedBy) })
	refused(t, err, "Invalid", "metadata.annotations[ichor.maesh.dev/requested-by]", "cannot be removed", "keep the annotation")
	// The neighbour: an update that leaves it alone passes.
	testenv.Must(t, update(t, root, tcr, func(r *ichorv1alpha1.TalosCredentialRequest) { metav1.SetMetaDataLabel(&r.ObjectMeta, "team", "blue") }))
	wantAnnotation(t, tcr, requestedBy, "otto")
}

// Rule: a MachineReclaim records who created it and who typed the UUID it
// resets on (the create or the update that wrote spec.confirmUUID); neither
// can be chosen by the client or changed afterwards.
func TestReclaimRecordsRequesterAndConfirmer(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	runReconcilers(t, ns)
	for _, name := range []string{"r1", "r2"} {
		testenv.Must(t, root.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-talosconfig"},
			Type:       ichorv1alpha1.ForeignTalosconfigSecretType,
			StringData: map[string]string{"talosconfig": "context: foreign\n"},
		}))
	}
	newReclaim := func(name string) *ichorv1alpha1.MachineReclaim {
		return &ichorv1alpha1.MachineReclaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ichorv1alpha1.MachineReclaimSpec{
				Address:        "192.168.10.51",
				CredentialsRef: ichorv1alpha1.SecretReference{Name: name + "-talosconfig"},
			},
		}
	}
	// A second person who holds the verb reclaim.
	confirmer := grantUser(t, "rhea", rbacv1.PolicyRule{APIGroups: []string{ichorv1alpha1.Group}, Resources: []string{"machinereclaims"}, Verbs: []string{"reclaim", "get", "update"}})

	r := newReclaim("r1")
	r.Annotations = map[string]string{requestedBy: "mallory", confirmedBy: "mallory"}
	testenv.Must(t, admin.Create(ctx, r))
	wantAnnotation(t, r, requestedBy, "ada")
	wantNoAnnotation(t, r, confirmedBy) // nobody typed a UUID

	// The reconciler records the requester (this reclaim then fails on its
	// unusable talosconfig, which changes nothing here).
	testenv.Eventually(t, 0, "status.audit.requestedBy names the requester", func() error {
		got := &ichorv1alpha1.MachineReclaim{}
		testenv.Must(t, root.Get(ctx, client.ObjectKeyFromObject(r), got))
		if got.Status.Audit.RequestedBy != "ada" {
			return fmt.Errorf("status.audit %+v (phase %q), want requested by ada", got.Status.Audit, got.Status.Phase)
		}
		return nil
	})

	// The update that types the UUID names its writer, whatever it claims.
	testenv.Must(t, update(t, confirmer, r, func(r *ichorv1alpha1.MachineReclaim) {
		r.Spec.ConfirmUUID = "4c4c4544-0042-3510-8052-b4c04f384833"
		r.Annotations[confirmedBy] = "ada"
	}))
	wantAnnotation(t, r, confirmedBy, "rhea")
	wantAnnotation(t, r, requestedBy, "ada")

	// Neither can be rewritten without typing the UUID again.
	err := update(t, confirmer, r, func(r *ichorv1alpha1.MachineReclaim) { r.Annotations[confirmedBy] = "ada" })
	refused(t, err, "Invalid", "metadata.annotations[ichor.maesh.dev/confirmed-by]", `"rhea"`, "cannot be changed")
	err = update(t, root, r, func(r *ichorv1alpha1.MachineReclaim) { r.Annotations[requestedBy] = "rhea" })
	refused(t, err, "Invalid", "metadata.annotations[ichor.maesh.dev/requested-by]", `"ada"`, "cannot be changed")
	err = update(t, root, r, func(r *ichorv1alpha1.MachineReclaim) { delete(r.Annotations, requestedBy) })
	refused(t, err, "Invalid", "metadata.annotations[ichor.maesh.dev/requested-by]", "cannot be removed")

	// Clearing the UUID leaves nobody as the confirmer.
	testenv.Must(t, update(t, admin, r, func(r *ichorv1alpha1.MachineReclaim) { r.Spec.ConfirmUUID = "" }))
	wantNoAnnotation(t, r, confirmedBy)
	wantAnnotation(t, r, requestedBy, "ada")

	// A UUID typed at creation is confirmed by the creator.
	r2 := newReclaim("r2")
	r2.Spec.ConfirmUUID = "4c4c4544-0042-3510-8052-b4c04f384833"
	testenv.Must(t, admin.Create(ctx, r2))
	wantAnnotation(t, r2, requestedBy, "ada")
	wantAnnotation(t, r2, confirmedBy, "ada")
}

// The validating webhooks check the stamp themselves too, so a create that
// reaches them unstamped (the mutating webhook missing) cannot carry a name
// the client chose. The API server always runs the mutating webhook first, so
// these decisions are checked directly.
func TestStampChecksWithoutTheMutatingWebhook(t *testing.T) {
	withAnnotations := func(uuid string, a map[string]string) *ichorv1alpha1.MachineReclaim {
		return &ichorv1alpha1.MachineReclaim{ObjectMeta: metav1.ObjectMeta{Name: "r", Annotations: a}, Spec: ichorv1alpha1.MachineReclaimSpec{ConfirmUUID: uuid}}
	}
	for _, tc := range []struct {
		name    string
		got     func() int
		refused bool
	}{
		{"requester absent", func() int { return len(requesterOnCreate(withAnnotations("", nil), "ada")) }, false},
		{"requester is the user", func() int {
			return len(requesterOnCreate(withAnnotations("", map[string]string{requestedBy: "ada"}), "ada"))
		}, false},
		{"requester is someone else", func() int {
			return len(requesterOnCreate(withAnnotations("", map[string]string{requestedBy: "mallory"}), "ada"))
		}, true},
		{"confirmer without a UUID", func() int {
			return len(confirmerOnWrite("ada", withAnnotations("", map[string]string{confirmedBy: "ada"})))
		}, true},
		{"confirmer is someone else", func() int {
			return len(confirmerOnWrite("ada", withAnnotations("u", map[string]string{confirmedBy: "mallory"})))
		}, true},
		{"confirmer is the writer", func() int {
			return len(confirmerOnWrite("ada", withAnnotations("u", map[string]string{confirmedBy: "ada"})))
		}, false},
		{"added to an object created without it", func() int {
			return len(keptAnnotation(withAnnotations("", nil), withAnnotations("", map[string]string{requestedBy: "ada"}), requestedBy))
		}, true},
	} {
		if got := tc.got() > 0; got != tc.refused {
			t.Errorf("%s: refused %v, want %v", tc.name, got, tc.refused)
		}
	}
	// The refusal says what to do.
	msg := requesterOnCreate(withAnnotations("", map[string]string{requestedBy: "mallory"}), "ada")[0].Error()
	for _, want := range []string{"metadata.annotations[ichor.maesh.dev/requested-by]", `"mallory"`, `"ada"`, "leave the annotation out"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not say %q", msg, want)
		}
	}
}
