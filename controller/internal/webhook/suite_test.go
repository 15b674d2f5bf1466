package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The suite runs a real kube-apiserver and etcd with Ichor's CRDs, the
// generated Validating- and MutatingWebhookConfiguration (pointed by envtest
// at this process) and the RBAC of kustomize/base/rbac, and serves the webhooks from
// a controller-runtime manager as cmd/main.go does. Users are real: each has a
// client certificate, and RBAC and the webhooks' SubjectAccessReviews see them.
var (
	env    *testenv.Env
	scheme = runtime.NewScheme()

	// root is the cluster administrator (system:masters): it sets up fixtures.
	root client.Client
	// rootUser is root's user name.
	rootUser = "admin"
	// viewer, operator and admin are members of the groups ichor:viewer,
	// ichor:operator and ichor:admin.
	viewer, operator, admin client.Client
	// adminWarnings collects the admission warnings admin receives.
	adminWarnings = &warningRecorder{}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := ichorv1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	var err error
	env, err = testenv.Start(testenv.Options{Scheme: scheme, WebhookDirs: []string{"kustomize/base/webhook"}})
	if err != nil {
		// A missing API server is a failure, never a skip.
		fmt.Fprintf(os.Stderr, "FAIL: cannot start the test API server: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the test API server: %v\n", err)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := setup(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	return m.Run()
}

func setup(ctx context.Context) error {
	root = env.Client
	// The base's namespaced Role lives in Ichor's namespace.
	if err := root.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ichor-system"}}); err != nil {
		return err
	}
	if err := env.ApplyDir(ctx, "kustomize/base/rbac"); err != nil {
		return fmt.Errorf("installing RBAC: %w", err)
	}
	wh := env.Webhook()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          ctrlwebhook.NewServer(ctrlwebhook.Options{Host: wh.Host, Port: wh.Port, CertDir: wh.CertDir}),
	})
	if err != nil {
		return err
	}
	if err := Setup(mgr, Options{Namespace: "ichor-system"}); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		}
	}()
	if err := waitForServer(net.JoinHostPort(wh.Host, strconv.Itoa(wh.Port))); err != nil {
		return err
	}
	if viewer, err = userClient("vera", nil, "ichor:viewer"); err != nil {
		return err
	}
	if operator, err = userClient("otto", nil, "ichor:operator"); err != nil {
		return err
	}
	admin, err = userClient("ada", adminWarnings, "ichor:admin")
	return err
}

func waitForServer(addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		d := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // only probing that the server listens
		conn, err := d.DialContext(context.Background(), "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("webhook server at %s did not start: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// userClient returns a client that authenticates as name in groups.
func userClient(name string, warnings *warningRecorder, groups ...string) (client.Client, error) {
	cfg, err := env.UserConfig(name, groups...)
	if err != nil {
		return nil, err
	}
	if warnings != nil {
		cfg.WarningHandler = warnings
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// grantUser binds a ClusterRole with rules to user name and returns a client as that user.
func grantUser(t *testing.T, name string, rules ...rbacv1.PolicyRule) client.Client {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-" + name}, Rules: rules}
	testenv.Must(t, root.Create(ctx, role))
	testenv.Must(t, root.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}))
	c, err := userClient(name, nil)
	testenv.Must(t, err)
	for _, r := range rules {
		awaitAllowed(t, name, r.APIGroups[0], r.Resources[0], r.Verbs[0])
	}
	return c
}

// awaitAllowed polls the API server's authorizer until user may do verb on
// resource: RBAC caches update quickly, but not synchronously with the write.
func awaitAllowed(t *testing.T, user, group, resource, verb string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: group, Resource: resource, Verb: verb},
		}}
		testenv.Must(t, root.Create(context.Background(), sar))
		if sar.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("RBAC never allowed %s to %s %s.%s", user, verb, resource, group)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "wh-"}}
	testenv.Must(t, root.Create(context.Background(), ns))
	return ns.Name
}

// refused asserts that err is a refusal of the given kind (Invalid or
// Forbidden) whose message contains every want.
func refused(t *testing.T, err error, kind string, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want a %s refusal mentioning %q, the API server accepted the write", kind, want)
	}
	switch kind {
	case "Invalid":
		if !apierrors.IsInvalid(err) {
			t.Fatalf("want Invalid, got %v", err)
		}
	case "Forbidden":
		if !apierrors.IsForbidden(err) {
			t.Fatalf("want Forbidden, got %v", err)
		}
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("not an API status: %v", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not say %q", err.Error(), w)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func newCluster(ns, name string, mutate ...func(*ichorv1alpha1.TalosCluster)) *ichorv1alpha1.TalosCluster {
	c := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: "1.37.2",
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.0.0.10"},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: name + "-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: ptr(true)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, Tunnel: "vxlan", KubeProxy: ichorv1alpha1.KubeProxyEnabled},
			Network:           ichorv1alpha1.ClusterNetwork{PodSubnets: []string{"10.244.0.0/16"}, ServiceSubnets: []string{"10.96.0.0/12"}},
		},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func newMachine(ns, name, cluster, role, state string, mutate ...func(*ichorv1alpha1.TalosMachine)) *ichorv1alpha1.TalosMachine {
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: cluster,
			Identity:    ichorv1alpha1.MachineIdentity{UUID: "uuid-" + name},
			Role:        role,
			Approval:    ichorv1alpha1.MachineApproval{State: state},
		},
	}
	if state != ichorv1alpha1.ApprovalPending && state != "" {
		// Fixtures are created by root, envtest's administrator "admin".
		m.Spec.Approval.DecidedBy = rootUser
		m.Spec.Approval.DecidedAt = ptr(metav1.Now())
	}
	for _, f := range mutate {
		f(m)
	}
	return m
}

func allowDelete(o client.Object) {
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[ichorv1alpha1.AllowDeleteAnnotation] = "true"
	o.SetAnnotations(a)
}

// update re-reads obj as c sees it, applies change and writes it back.
func update[T client.Object](t *testing.T, c client.Client, obj T, change func(T)) error {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKeyFromObject(obj)
	// A conflict (a controller wrote the status meanwhile) is never the
	// answer a test waits for: read again and retry, as a client would.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		// Start from an empty object: decoding into a filled one keeps fields the server omits.
		v := reflect.ValueOf(obj).Elem()
		v.Set(reflect.Zero(v.Type()))
		if err := c.Get(ctx, key, obj); err != nil {
			t.Fatalf("get %s: %v", obj.GetName(), err)
		}
		change(obj)
		return c.Update(ctx, obj)
	})
}

func metaName(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }

// waitForOverrideEvent waits for the Warning Event an override leaves on the cluster.
func waitForOverrideEvent(t *testing.T, ns, cluster, mentions string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		list := &eventsv1.EventList{}
		testenv.Must(t, root.List(context.Background(), list, client.InNamespace(ns)))
		for _, e := range list.Items {
			if e.Reason == ichorv1alpha1.OverrideReason && e.Type == corev1.EventTypeWarning &&
				e.Regarding.Kind == "TalosCluster" && e.Regarding.Name == cluster && strings.Contains(e.Note, mentions) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Warning Event %q on TalosCluster %s/%s mentioning %q (%d events)", ichorv1alpha1.OverrideReason, ns, cluster, mentions, len(list.Items))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
