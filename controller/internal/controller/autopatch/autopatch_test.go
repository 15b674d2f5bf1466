package autopatch_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	"github.com/maeshinshin/ichor/controller/internal/controller/autopatch"
	"github.com/maeshinshin/ichor/controller/internal/webhook"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The suite runs a real kube-apiserver with Ichor's validating webhooks and
// RBAC as shipped (kustomize/base/webhook, kustomize/base/rbac, autopatch.yaml
// among them) and an audit log of every write to talosclusters. The
// webhooks and the auto-patch reconciler run in one manager that
// authenticates as the controller's ServiceAccount, so the rights under test
// are the shipped ones: impersonating ichor-auto-patch, and that
// ServiceAccount's update and patch on talosclusters.
const (
	ns          = "ichor-system"
	waitTimeout = 90 * time.Second
)

var (
	controllerUser = guard.ControllerUsername(ns)
	autoPatchUser  = guard.AutoPatchUsername(ns)
	saGroups       = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}

	suite    *testenv.Suite
	admin    client.Client
	ctrlCfg  *rest.Config
	auditLog string
)

// auditPolicy logs, at Metadata level (who, what, the answer; no bodies),
// every write to talosclusters and nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete]
    resources:
      - group: ichor.maesh.dev
        resources: [talosclusters]
  - level: None
`

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ichor-autopatch-audit-")
	if err != nil {
		panic(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		panic(err)
	}
	auditLog = filepath.Join(dir, "audit.log")
	opts := testenv.SuiteOptions{Env: testenv.Options{
		WebhookDirs: []string{"kustomize/base/webhook"},
		KubeAPIServerFlags: map[string]string{
			"audit-policy-file": policy,
			"audit-log-path":    auditLog,
			"audit-log-mode":    "blocking",
		},
	}}
	return testenv.Main(m, opts, func(ctx context.Context, s *testenv.Suite) (func(), error) {
		suite, admin = s, s.Env.Client
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
		if err := s.Env.ApplyDir(ctx, "kustomize/base/rbac"); err != nil {
			return nil, fmt.Errorf("installing RBAC: %w", err)
		}
		var err error
		if ctrlCfg, err = s.Env.UserConfig(controllerUser, saGroups...); err != nil {
			return nil, err
		}
		wh := s.Env.Webhook()
		mgr, err := ctrl.NewManager(ctrlCfg, ctrl.Options{
			Scheme:                 s.Scheme,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			WebhookServer:          ctrlwebhook.NewServer(ctrlwebhook.Options{Host: wh.Host, Port: wh.Port, CertDir: wh.CertDir}),
		})
		if err != nil {
			return nil, err
		}
		if err := webhook.Setup(mgr, webhook.Options{Namespace: ns}); err != nil {
			return nil, err
		}
		if err := (&autopatch.Reconciler{Namespace: ns}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if err := testenv.StartManager(ctx, mgr); err != nil {
			return nil, err
		}
		return nil, waitForServer(ctx, net.JoinHostPort(wh.Host, strconv.Itoa(wh.Port)))
	})
}

// waitForServer polls until the webhook server accepts TLS connections (a
// minute: a loaded 2-core machine starts it slowly).
func waitForServer(ctx context.Context, addr string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		d := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // only probing that the server listens
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			last = err
			return false, nil //nolint:nilerr // not listening yet: poll again
		}
		return true, conn.Close()
	})
	if err != nil {
		return fmt.Errorf("webhook server at %s did not start: %w (last: %w)", addr, err, last)
	}
	return nil
}

// awaitRBAC waits until the API server's authorizer answers the shipped
// rules: the controller may impersonate ichor-auto-patch, which may patch
// talosclusters (RBAC's cache follows the writes closely, not synchronously).
func awaitRBAC(t *testing.T) {
	t.Helper()
	check := func(user string, groups []string, attrs *authorizationv1.ResourceAttributes) func() (bool, string) {
		return func() (bool, string) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: attrs}}
			if err := admin.Create(context.Background(), sar); err != nil {
				return false, err.Error()
			}
			return sar.Status.Allowed, fmt.Sprintf("%s may not %s %s", user, attrs.Verb, attrs.Resource)
		}
	}
	testenv.EventuallyOK(t, waitTimeout, "the controller may impersonate ichor-auto-patch", check(controllerUser, saGroups,
		&authorizationv1.ResourceAttributes{Namespace: ns, Verb: "impersonate", Resource: "serviceaccounts", Name: guard.AutoPatchServiceAccount}))
	testenv.EventuallyOK(t, waitTimeout, "ichor-auto-patch may patch talosclusters", check(autoPatchUser, saGroups,
		&authorizationv1.ResourceAttributes{Verb: "patch", Group: ichorv1alpha1.Group, Resource: "talosclusters"}))
}

// auditEvent is the part of an audit.k8s.io/v1 Event the test reads.
type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	ImpersonatedUser *struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
	ObjectRef struct {
		Resource, Namespace, Name, Subresource string
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// writes are the completed, successful updates and patches of TalosCluster
// namespace/name (not of its status: the policy names no subresource)
// in the audit log.
func writes(t *testing.T, namespace, name string) []auditEvent {
	t.Helper()
	f, err := os.Open(auditLog)
	testenv.Must(t, err)
	defer func() { _ = f.Close() }()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("an audit line is not JSON: %v", err)
		}
		if e.Stage == "ResponseComplete" && e.ObjectRef.Resource == "talosclusters" && e.ObjectRef.Namespace == namespace &&
			e.ObjectRef.Name == name && e.ResponseStatus.Code < 300 && e.Verb != "create" {
			out = append(out, e)
		}
	}
	testenv.Must(t, sc.Err())
	return out
}

func cluster(namespace, name string, enabled bool) *ichorv1alpha1.TalosCluster {
	c := testenv.TalosCluster(namespace, name)
	c.Labels = map[string]string{"team": "infra"}
	c.Spec.TalosVersion, c.Spec.KubernetesVersion = "v1.14.0", "1.37.0"
	c.Spec.AutoPatch.Enabled = enabled
	return c
}

func get(t *testing.T, namespace, name string) *ichorv1alpha1.TalosCluster {
	t.Helper()
	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, admin.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, c))
	return c
}

func mergePatch(t *testing.T, c client.Client, namespace, name, body string) error {
	t.Helper()
	obj := &ichorv1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	return c.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(body)))
}

func refusedWith(t *testing.T, what string, err error, words ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s was allowed", what)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("%s: the refusal does not say %q: %v", what, w, err)
		}
	}
}

// TestAutoPatchUpgrade: with spec.autoPatch.enabled, the controller moves
// spec.talosVersion and spec.kubernetesVersion to the pinned set's newer
// patches of the running minors, and nothing else; the API server's audit
// log records that write as made by the controller impersonating
// ichor-auto-patch, and no write of the cluster as the controller itself. A
// cluster with automatic patches off is left alone. The webhook refuses the
// controller's own identity any spec write, and the auto-patch
// ServiceAccount anything beyond a newer patch; RBAC refuses the
// controller impersonating anyone else and the ServiceAccount a delete.
func TestAutoPatchUpgrade(t *testing.T) {
	ctx := context.Background()
	awaitRBAC(t)
	space := fmt.Sprintf("autopatch-%d", time.Now().UnixNano())
	testenv.Must(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: space}}))

	on, off := cluster(space, "prod", true), cluster(space, "manual", false)
	for _, c := range []*ichorv1alpha1.TalosCluster{on, off} {
		testenv.Must(t, admin.Create(ctx, c))
		// The machines run the spec's versions (what the upgrade reconcilers record).
		testenv.UpdateStatus(t, admin, c, func(cur *ichorv1alpha1.TalosCluster) {
			cur.Status.TalosUpgrade.Version, cur.Status.KubernetesUpgrade.Version = cur.Spec.TalosVersion, cur.Spec.KubernetesVersion
		})
	}
	before := get(t, space, "prod")

	// The test's premise: the pinned set holds a newer patch of both minors.
	if !strings.HasPrefix(release.Pinned.Talos, "v1.14.") || release.Pinned.Talos == "v1.14.0" ||
		!strings.HasPrefix(release.Pinned.Kubernetes, "1.37.") || release.Pinned.Kubernetes == "1.37.0" {
		t.Fatalf("the pinned set (%s, %s) has no newer patch of v1.14.0 and 1.37.0: move the test's versions", release.Pinned.Talos, release.Pinned.Kubernetes)
	}
	testenv.EventuallyOK(t, waitTimeout, "the versions move to the pinned patches", func() (bool, string) {
		c := get(t, space, "prod")
		return c.Spec.TalosVersion == release.Pinned.Talos && c.Spec.KubernetesVersion == release.Pinned.Kubernetes,
			fmt.Sprintf("spec has %s and %s", c.Spec.TalosVersion, c.Spec.KubernetesVersion)
	})
	after := get(t, space, "prod")
	want := before.Spec.DeepCopy()
	want.TalosVersion, want.KubernetesVersion = release.Pinned.Talos, release.Pinned.Kubernetes
	if !reflect.DeepEqual(after.Spec, *want) {
		t.Errorf("the write changed more than the two versions:\nbefore %+v\nafter  %+v", before.Spec, after.Spec)
	}
	if !reflect.DeepEqual(after.Labels, before.Labels) || !reflect.DeepEqual(after.Annotations, before.Annotations) || !reflect.DeepEqual(after.Finalizers, before.Finalizers) {
		t.Errorf("the write changed metadata: labels %v annotations %v finalizers %v", after.Labels, after.Annotations, after.Finalizers)
	}

	// The audit log: the write is the controller as ichor-auto-patch, and
	// nothing wrote the cluster as the controller itself.
	var delegated int
	testenv.EventuallyOK(t, waitTimeout, "the audit log records the delegated write", func() (bool, string) {
		delegated = 0
		ws := writes(t, space, "prod")
		for _, w := range ws {
			if w.ImpersonatedUser != nil && w.ImpersonatedUser.Username == autoPatchUser && w.User.Username == controllerUser && w.Verb == "patch" && w.ObjectRef.Subresource == "" {
				delegated++
			}
		}
		return delegated > 0, fmt.Sprintf("%d writes of prod, none by %s as %s", len(ws), controllerUser, autoPatchUser)
	})
	for _, w := range writes(t, space, "prod") {
		if w.ImpersonatedUser == nil && w.User.Username == controllerUser {
			t.Errorf("the controller wrote the cluster with its own identity: %+v", w)
		}
		if w.ImpersonatedUser != nil && w.ImpersonatedUser.Username != autoPatchUser {
			t.Errorf("a write impersonated someone other than %s: %+v", autoPatchUser, w)
		}
	}
	if delegated != 1 {
		t.Errorf("want one delegated write (both versions at once), got %d", delegated)
	}

	// The cluster's Events name the delegated user.
	testenv.EventuallyOK(t, waitTimeout, "an AutoPatchWritten Event names the delegated user", func() (bool, string) {
		var evs eventsv1.EventList
		if err := admin.List(ctx, &evs, client.InNamespace(space)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == autopatch.WrittenReason && e.Regarding.Name == "prod" {
				return strings.Contains(e.Note, autoPatchUser) && strings.Contains(e.Note, "spec.talosVersion v1.14.0 → "+release.Pinned.Talos), e.Note
			}
		}
		return false, fmt.Sprintf("no %s Event among %d", autopatch.WrittenReason, len(evs.Items))
	})

	// Automatic patches off: the cluster is left alone.
	if m := get(t, space, "manual"); m.Spec.TalosVersion != "v1.14.0" || m.Spec.KubernetesVersion != "1.37.0" || len(writes(t, space, "manual")) != 0 {
		t.Errorf("a cluster with automatic patches off was written: %s %s, writes %+v", m.Spec.TalosVersion, m.Spec.KubernetesVersion, writes(t, space, "manual"))
	}

	// The controller's own identity never writes spec, even a patch it could delegate.
	ctrlClient, err := client.New(ctrlCfg, client.Options{Scheme: suite.Scheme})
	testenv.Must(t, err)
	refusedWith(t, "a spec write as the controller", mergePatch(t, ctrlClient, space, "manual", `{"spec":{"talosVersion":"v1.14.1"}}`),
		"never writes", guard.AutoPatchServiceAccount)

	// As ichor-auto-patch: a newer patch only, of a cluster that opted in, and nothing else.
	bot, err := client.New(autopatch.ImpersonatingConfig(ctrlCfg, ns), client.Options{Scheme: suite.Scheme})
	testenv.Must(t, err)
	refusedWith(t, "a minor step as ichor-auto-patch", mergePatch(t, bot, space, "prod", `{"spec":{"kubernetesVersion":"1.38.0"}}`),
		"spec.kubernetesVersion", "not a newer patch of the running minor")
	refusedWith(t, "a downgrade as ichor-auto-patch", mergePatch(t, bot, space, "prod", `{"spec":{"talosVersion":"v1.14.0"}}`),
		"not a newer patch of the running minor")
	refusedWith(t, "a pause as ichor-auto-patch", mergePatch(t, bot, space, "prod", `{"spec":{"paused":true}}`),
		"other than talosVersion and kubernetesVersion")
	refusedWith(t, "an annotation as ichor-auto-patch", mergePatch(t, bot, space, "prod", `{"metadata":{"annotations":{"`+ichorv1alpha1.PausedReasonAnnotation+`":"x"}}}`),
		"labels, annotations")
	refusedWith(t, "a patch of a cluster with automatic patches off", mergePatch(t, bot, space, "manual", `{"spec":{"talosVersion":"v1.14.1"}}`),
		"spec.autoPatch.enabled")
	if err := bot.Delete(ctx, get(t, space, "manual")); !apierrors.IsForbidden(err) {
		t.Errorf("ichor-auto-patch deleting a cluster: want forbidden by RBAC, got %v", err)
	}
	if err := bot.Status().Update(ctx, get(t, space, "prod")); !apierrors.IsForbidden(err) {
		t.Errorf("ichor-auto-patch writing status: want forbidden by RBAC, got %v", err)
	}

	// The controller may impersonate ichor-auto-patch and nobody else.
	other := rest.CopyConfig(ctrlCfg)
	other.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":ichor-ui"}
	otherClient, err := client.New(other, client.Options{Scheme: suite.Scheme})
	testenv.Must(t, err)
	if err := otherClient.Get(ctx, types.NamespacedName{Namespace: space, Name: "prod"}, &ichorv1alpha1.TalosCluster{}); !apierrors.IsForbidden(err) {
		t.Errorf("the controller impersonating ichor-ui: want forbidden, got %v", err)
	}

	if got := get(t, space, "prod"); !reflect.DeepEqual(got.Spec, *want) {
		t.Errorf("a refused write changed the cluster: %+v", got.Spec)
	}
}
