package metrics_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/clusterstatus"
	"github.com/maeshinshin/ichor/controller/internal/controller/discovery"
	"github.com/maeshinshin/ichor/controller/internal/controller/etcdbackup"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichormetrics "github.com/maeshinshin/ichor/controller/internal/metrics"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The suite runs a controller manager as cmd/main.go builds it — the secure,
// authenticated metrics server, the object collector on the manager's cache,
// the Talos interceptors — with the reconcilers whose events the metrics
// count (discovery, cluster status, etcd backups), on a real API server and
// one emulated Talos machine in maintenance mode (127.77.40.1).
var (
	k8s         client.Client
	clientset   *kubernetes.Clientset
	metricsAddr string
)

const (
	ns      = "default"
	subnet  = "127.77.40.0/24"
	machine = "127.77.40.1"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.SuiteOptions{}, setup))
}

func setup(ctx context.Context, s *testenv.Suite) (func(), error) {
	k8s = s.Env.Client

	var err error
	if clientset, err = kubernetes.NewForConfig(s.Env.Config); err != nil {
		return nil, err
	}

	world, err := talosemu.Start(ctx, &talosemu.Spec{
		Subnet:   subnet,
		Machines: []talosemu.MachineSpec{{Name: "m-1", Address: machine}},
	}, filepath.Join(s.Dir, "world"))
	if err != nil {
		return nil, fmt.Errorf("starting the emulated world: %w", err)
	}

	if metricsAddr, err = freeLoopbackAddr(); err != nil {
		return world.Close, err
	}

	talos.SetInterceptors(ichormetrics.TalosInterceptors())

	mgr, err := ctrl.NewManager(s.Env.Config, ctrl.Options{
		Scheme:                 s.Scheme,
		Metrics:                ichormetrics.ServerOptions(metricsAddr, ""),
		HealthProbeBindAddress: "0",
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{lock.DefaultNamespace: {}}},
		}},
	})
	if err != nil {
		return world.Close, err
	}

	if err := ichormetrics.Register(mgr.GetCache(), lock.DefaultNamespace); err != nil {
		return world.Close, err
	}

	if err := machinestate.RegisterIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return world.Close, err
	}

	for _, r := range []interface{ SetupWithManager(ctrl.Manager) error }{
		&discovery.Reconciler{DefaultInterval: time.Hour, ProbeTimeout: 5 * time.Second},
		&clusterstatus.Reconciler{},
		&etcdbackup.Reconciler{TempDir: s.Dir, RetryAfter: time.Hour},
	} {
		if err := r.SetupWithManager(mgr); err != nil {
			return world.Close, err
		}
	}

	if err := objects(ctx); err != nil {
		return world.Close, err
	}

	return world.Close, testenv.StartManager(ctx, mgr)
}

// objects are what the object metrics describe: a cluster whose discovery
// lists the emulated machine, with its bundle; a paused cluster; an approved
// machine that is Ready and drifted; an operation paused on a failed step;
// the lock Lease it holds; an etcd backup asked to run now without its
// Secrets (it fails).
func objects(ctx context.Context) error {
	c := testenv.TalosCluster(ns, "prod")
	c.Spec.Discovery.Addresses = []string{machine}

	b, err := bundle.Generate(secrets.NewClock(), c.Spec.VersionContract)
	if err != nil {
		return err
	}

	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, b)
	if err != nil {
		return err
	}

	held := testenv.TalosCluster(ns, "held")
	held.Spec.Paused = true

	now := metav1.Now()
	m := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cp-1"},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: "prod", Address: "192.0.2.10", Role: ichorv1alpha1.RoleControlPlane, Hostname: "cp-1",
			Identity: ichorv1alpha1.MachineIdentity{Serial: "SER-cp-1"},
			Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
			Install:  ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
		},
	}

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "upgrade-1"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: "prod", Type: ichorv1alpha1.OperationTalos,
			Talos: &ichorv1alpha1.TalosUpgrade{Version: "v1.14.2"},
		},
	}

	backup := &ichorv1alpha1.TalosEtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly",
			Annotations: map[string]string{ichorv1alpha1.BackupRequestedAnnotation: "now"}},
		Spec: ichorv1alpha1.TalosEtcdBackupSpec{
			ClusterName: "prod", Schedule: "0 3 * * *",
			S3:               ichorv1alpha1.S3Destination{Endpoint: "https://s3.example.com", Bucket: "etcd", CredentialsRef: ichorv1alpha1.SecretReference{Name: "missing"}},
			EncryptionKeyRef: ichorv1alpha1.SecretReference{Name: "missing-too"},
		},
	}

	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lock.DefaultNamespace}}, sec, c, held, m, op, backup,
	} {
		if err := k8s.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}

	m.Status.Conditions = []metav1.Condition{
		{Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: "Provisioned", LastTransitionTime: now},
		{Type: ichorv1alpha1.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: now},
		{Type: ichorv1alpha1.DriftedCondition, Status: metav1.ConditionTrue, Reason: ichorv1alpha1.DriftDetectedReason, LastTransitionTime: now},
	}
	if err := k8s.Status().Update(ctx, m); err != nil {
		return err
	}

	op.Status.Phase, op.Status.FailedStep, op.Status.FailureReason = ichorv1alpha1.OperationPaused, "upgrade", "step upgrade failed"
	op.Status.StartedAt = &now
	if err := k8s.Status().Update(ctx, op); err != nil {
		return err
	}

	holder := lock.OperationIdentity(ns, op.Name)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: lock.DefaultNamespace, Name: lock.LeaseName(client.ObjectKeyFromObject(c)),
			Labels: map[string]string{lock.LabelCluster: "prod", lock.LabelClusterNamespace: ns}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}

	return k8s.Create(ctx, lease)
}

func freeLoopbackAddr() (string, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}

	defer l.Close() //nolint:errcheck // only its port is wanted

	return l.Addr().String(), nil
}

// scrape GETs /metrics with token (none when empty) and returns the status
// and the body.
func scrape(t *testing.T, token string) (int, string) {
	t.Helper()

	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+metricsAddr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}

	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}

	// The server's certificate is self-signed, made at start.
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed test server

	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}

	defer resp.Body.Close() //nolint:errcheck // read to the end

	body, _ := io.ReadAll(resp.Body)

	return resp.StatusCode, string(body)
}

// serviceAccountToken creates a ServiceAccount and returns a token of it.
func serviceAccountToken(t *testing.T, name string) string {
	t.Helper()

	ctx := context.Background()
	testenv.Must(t, k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))

	tr, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	testenv.Must(t, err)

	return tr.Status.Token
}

// documented reads the README's metrics table: the metrics served by from
// (controller or ichor-ui).
func documented(t *testing.T, from string) []string {
	t.Helper()

	root, err := testenv.RepoRoot()
	testenv.Must(t, err)

	f, err := os.Open(filepath.Join(root, "README.md"))
	testenv.Must(t, err)

	defer f.Close() //nolint:errcheck // read-only

	var out []string

	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) > 3 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`ichor_") && strings.TrimSpace(cells[2]) == from {
			out = append(out, strings.Trim(strings.TrimSpace(cells[1]), "`"))
		}
	}

	if len(out) == 0 {
		t.Fatalf("the README's metrics table lists nothing from %s", from)
	}

	return out
}

func families(t *testing.T, body string) map[string]bool {
	t.Helper()

	p := expfmt.NewTextParser(model.UTF8Validation)

	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("the scrape is not Prometheus's text format: %v", err)
	}

	out := map[string]bool{}
	for name := range fams {
		out[name] = true
	}

	return out
}

// TestMetricsExported scrapes the running controller's /metrics: without a
// token it is refused (401), with the token of a ServiceAccount that may not
// get /metrics too (403), and with the ClusterRole ichor-metrics-reader the
// chart ships bound to it every metric the README documents for the
// controller is there.
func TestMetricsExported(t *testing.T) {
	ctx := context.Background()

	testenv.EventuallyOK(t, testenv.WaitTimeout, "the metrics server answers", func() (bool, string) {
		code, body := scrape(t, "")
		return code != 0, body
	})

	if code, body := scrape(t, ""); code != http.StatusUnauthorized {
		t.Fatalf("a scrape without a token: %d %s, want 401", code, body)
	}

	token := serviceAccountToken(t, "prometheus")
	if code, body := scrape(t, token); code != http.StatusForbidden {
		t.Fatalf("a scrape by a ServiceAccount without get on /metrics: %d %s, want 403", code, body)
	}

	root, err := testenv.RepoRoot()
	testenv.Must(t, err)

	data, err := os.ReadFile(filepath.Join(root, "kustomize", "base", "rbac", "metrics.yaml"))
	testenv.Must(t, err)

	var role rbacv1.ClusterRole
	testenv.Must(t, yaml.UnmarshalStrict(data, &role))
	testenv.Must(t, k8s.Create(ctx, &role))
	testenv.Must(t, k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "prometheus"}},
	}))

	want := documented(t, "controller")

	var body string

	// The authorizer caches a denial for 30 s; the discovery scan and the
	// backup attempt happen in the background.
	testenv.EventuallyOK(t, 3*testenv.WaitTimeout, "every documented controller metric in the scrape", func() (bool, string) {
		code, b := scrape(t, token)
		if code != http.StatusOK {
			return false, fmt.Sprintf("status %d: %s", code, b)
		}

		body = b
		got := families(t, b)

		var missing []string

		for _, name := range want {
			if !got[name] {
				missing = append(missing, name)
			}
		}

		return len(missing) == 0, "missing: " + strings.Join(missing, ", ")
	})

	// Some values, from the objects: the drifted machine, the operation
	// paused on failure and the lock it holds, the certificates, the scan.
	for _, line := range []string{
		`ichor_machines_drifted{cluster="prod",namespace="default"} 1`,
		`ichor_machine_ready{cluster="prod",machine="cp-1",namespace="default",role="controlplane"} 1`,
		`ichor_machines{cluster="prod",namespace="default",phase="Ready",role="controlplane"} 1`,
		`ichor_operation_paused{cause="failure",cluster="prod",namespace="default",operation="upgrade-1",type="talos"} 1`,
		`ichor_cluster_lock_holder{cluster="prod",holder="upgrade-1",kind="op",namespace="default"} 1`,
		`ichor_discovery_addresses{cluster="prod",namespace="default",result="Pending"} 1`,
		`ichor_metrics_collect_errors{kind="Lease"} 0`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("the scrape lacks %s", line)
		}
	}

	for _, ca := range []string{"talos", "kubernetes", "etcd", "aggregator"} {
		if !strings.Contains(body, `ichor_certificate_not_after_timestamp_seconds{ca="`+ca+`",cluster="prod",namespace="default"}`) {
			t.Errorf("the scrape lacks the %s CA's expiry", ca)
		}
	}

	if !strings.Contains(body, `ichor_talos_rpc_requests_total{code="OK",method="/machine.MachineService/Version"}`) &&
		!strings.Contains(body, `ichor_talos_rpc_requests_total{code="OK",method="/cosi.resource.State/Get"}`) {
		t.Errorf("the scan's Talos calls are not counted:\n%s", grep(body, "ichor_talos_rpc_requests_total"))
	}

	// Nothing of the bundle leaves through the metrics.
	for _, secret := range []string{"BEGIN", "PRIVATE KEY", "secrets.yaml"} {
		if strings.Contains(body, secret) {
			t.Errorf("the scrape holds %q", secret)
		}
	}
}

func grep(body, prefix string) string {
	var b strings.Builder

	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			b.WriteString(l + "\n")
		}
	}

	return b.String()
}
