package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/kube"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The suite runs the built ichor binary as a subprocess against a real
// kube-apiserver with Ichor's CRDs (no controller and no admission webhooks:
// the webhooks live in the controller module; the CLI runs the same shared
// guard checks before it writes).

// cliVersion is the version the test binary is built with, so that the
// version-skew refusal can be exercised.
const cliVersion = "v0.4.0"

var update = flag.Bool("update", false, "rewrite the golden files")

var (
	env        *testenv.Env
	k8s        client.Client
	bin        string
	kubeconfig string
	// testUser is the user the kubeconfig authenticates as.
	testUser string
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ichor-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()

	bin = filepath.Join(dir, "ichor")
	build := exec.CommandContext(context.Background(), "go", "build", "-o", bin, //nolint:gosec // the suite's own build of this package
		"-ldflags", "-X github.com/maeshinshin/ichor/contracts/pkg/version.version="+cliVersion, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: building ichor:", err)
		return 1
	}

	env, err = testenv.Start(testenv.Options{Scheme: kube.Scheme()})
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
	k8s = env.Client

	kc, err := env.KubeconfigYAML()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	as, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := as.Create(context.Background(), review); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	testUser = review.Status.UserInfo.Username
	return m.Run()
}

// result is what one run of the binary printed.
type result struct {
	stdout, stderr string
	err            error
}

func (r result) all() string { return r.stdout + r.stderr }

// invocation configures a run.
type invocation struct {
	stdin string
	env   []string
}

// baseEnv is the environment of the binary: the test kubeconfig, a home of
// its own, and nothing of the developer's.
func baseEnv(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "KUBECONFIG" || k == "HOME" || strings.HasPrefix(k, "ICHOR_") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "KUBECONFIG="+kubeconfig, "HOME="+t.TempDir())
}

func ichor(t *testing.T, args ...string) result {
	t.Helper()
	return ichorWith(t, invocation{}, args...)
}

func ichorWith(t *testing.T, inv invocation, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...) //nolint:gosec // the binary the suite built
	cmd.Env = append(baseEnv(t), inv.env...)
	cmd.Stdin = strings.NewReader(inv.stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return result{stdout: out.String(), stderr: errOut.String(), err: err}
}

func mustSucceed(t *testing.T, r result) result {
	t.Helper()
	if r.err != nil {
		t.Fatalf("ichor failed: %v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
	}
	return r
}

func mustFail(t *testing.T, r result, wants ...string) result {
	t.Helper()
	if r.err == nil {
		t.Fatalf("ichor succeeded, want a failure\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	for _, w := range wants {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("the error must contain %q; stderr:\n%s", w, r.stderr)
		}
	}
	return r
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// namespace creates a namespace for one test.
func namespace(t *testing.T, name string) string {
	t.Helper()
	must(t, k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	return name
}

func newCluster(ns, name string) *ichorv1alpha1.TalosCluster {
	return &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      "v1.14.1",
			VersionContract:   "v1.14",
			KubernetesVersion: "1.37.2",
			Endpoint:          ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: "10.0.0.10"},
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: name + "-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: 1, Schedulable: new(false)},
			CNI:               ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: ichorv1alpha1.KubeProxyReplaced},
		},
	}
}

func newMachine(ns, name, cluster string) *ichorv1alpha1.TalosMachine {
	return &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: cluster,
			Identity:    ichorv1alpha1.MachineIdentity{UUID: "4c4c4544-0000-0000-0000-" + fmt.Sprintf("%012d", len(name)), Serial: "SN-" + name, MACAddresses: []string{"52:54:00:00:00:01"}},
			Address:     "192.168.10.21",
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalPending},
		},
	}
}

// createMachine creates m and writes its status through the status subresource.
func createMachine(t *testing.T, m *ichorv1alpha1.TalosMachine) {
	t.Helper()
	st := m.Status
	must(t, k8s.Create(context.Background(), m))
	m.Status = st
	must(t, k8s.Status().Update(context.Background(), m))
}

func getMachine(t *testing.T, ns, name string) *ichorv1alpha1.TalosMachine {
	t.Helper()
	m := &ichorv1alpha1.TalosMachine{}
	must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, m))
	return m
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		must(t, os.MkdirAll("testdata", 0o750))
		must(t, os.WriteFile(path, []byte(got), 0o600))
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if string(want) != got {
		t.Fatalf("output differs from %s:\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// eventually polls cond until it holds or the generous deadline passes.
