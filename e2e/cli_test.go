package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// The scenario of issue 9 through the CLI, as a person runs it: ichor init
// --install manifest against the first of five emulated machines (Ichor runs
// in the cluster it manages: talosemu's pod runner runs its pods as
// processes of the binaries this package builds, admission webhooks on),
// discovery of the others, approval of two control planes and two workers,
// removal of a worker, which comes back as pending. Every binary is built
// from this tree and run as a subprocess. The console's tests
// (browser_test.go, config_editor_test.go) reach the in-cluster ichor-ui
// through `ichor ui`'s port-forward at the address init recorded.

const (
	assetsEnv  = "KUBEBUILDER_ASSETS"
	passphrase = "e2e-passphrase-not-a-secret-of-the-bundle" //nolint:gosec // the test's own store passphrase
	cluster    = "e2e"
	// subnet is the loopback subnet of this package's emulated machines, and
	// podSubnet the loopback range of their pods' processes.
	subnet    = "127.0.87.0/24"
	podSubnet = "127.87.0.0/24"
	// icNamespace is the namespace Ichor is installed in.
	icNamespace = "ichor-system"
)

var (
	worldOnce sync.Once
	theWorld  *world
	worldErr  error
	// cleanups run in TestMain after every test.
	cleanups []func()
)

func TestMain(m *testing.M) {
	code := m.Run()

	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}

	os.Exit(code)
}

// world is the emulated machines, the binaries and what the CLI printed.
type world struct {
	dir string
	bin string
	// cli is the ichor binary the world runs; "" is bin's (this tree's build).
	cli        string
	kubeconfig string
	env        []string
	machines   []emuMachine
	ctrlLog    string
	// uiURL is the address `ichor init --ui-url` recorded (a loopback port
	// `ichor ui` forwards to ichor-ui); "" when Ichor does not run in the cluster.
	uiURL string
	// control is the base URL of talosemu's control API (RPC counters, faults).
	control string
	// ctrl is the running ichor-controller process, emu talosemu's.
	ctrl, emu *exec.Cmd

	mu      sync.Mutex
	outputs bytes.Buffer // every CLI invocation's stdout and stderr
}

type emuMachine struct {
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	UUID     string `json:"uuid"`
}

func (m emuMachine) ip() string { return strings.Split(m.Endpoint, ":")[0] }

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}

	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}

		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory")
		}

		dir = parent
	}
}

// startWorld builds the binaries (sharedBin, once for the package), and starts five
// emulated machines (3 control planes, 2 workers) with Kubernetes on the
// first, whose kubelets run Ichor's pods as processes.
func startWorld() (*world, error) { return startWorldIn(subnet, 5, 3, podSubnet) }

// startWorldIn is startWorld with n machines, the first cps of them
// control planes, on another loopback subnet; pods "" means no pod runs
// (every pod is kwok's).
func startWorldIn(subnet string, n, cps int, pods string) (*world, error) {
	return startWorldWith(subnet, n, cps, pods)
}

// startWorldWith is startWorldIn with more talosemu flags.
func startWorldWith(subnet string, n, cps int, pods string, emuArgs ...string) (*world, error) {
	assets := os.Getenv(assetsEnv)
	if assets == "" {
		return nil, fmt.Errorf("%s is not set: run the e2e tests through `go tool task test`, or export %s=$(go tool task assets:dir)", assetsEnv, assetsEnv)
	}

	dir, err := os.MkdirTemp("", "ichor-e2e-")
	if err != nil {
		return nil, err
	}

	cleanups = append(cleanups, func() { _ = os.RemoveAll(dir) })

	bin, err := sharedBin()
	if err != nil {
		return nil, err
	}

	w := &world{dir: dir, bin: bin, kubeconfig: filepath.Join(dir, "kubeconfig"), ctrlLog: filepath.Join(dir, "controller.log")}
	w.env = append(os.Environ(), "ICHOR_HOME="+filepath.Join(dir, "home"), "ICHOR_PASSPHRASE="+passphrase, "KUBECONFIG="+w.kubeconfig)

	args := []string{"--machines", strconv.Itoa(n), "--controlplanes", strconv.Itoa(cps), "--subnet", subnet,
		"--kubernetes", "--single-apiserver", "--kube-assets", assets, "--state-dir", filepath.Join(dir, "machines"), "--control", "127.0.0.1:0"}
	if pods != "" {
		args = append(args, "--pod-bin-dir", w.bin, "--pod-subnet", pods)
	}

	args = append(args, emuArgs...)

	emu := exec.CommandContext(context.Background(), filepath.Join(w.bin, "talosemu"), args...) //nolint:gosec // our own binary
	emu.Stderr, _ = os.Create(filepath.Join(dir, "talosemu.log"))

	stdout, err := emu.StdoutPipe()
	if err != nil {
		return nil, err
	}

	if err := emu.Start(); err != nil {
		return nil, fmt.Errorf("starting talosemu: %w", err)
	}

	w.emu = emu
	cleanups = append(cleanups, func() { stopProcess(emu) })

	sc := bufio.NewScanner(stdout)
	for len(w.machines) < n && sc.Scan() {
		if _, url, ok := strings.Cut(sc.Text(), "; control API "); ok {
			w.control = strings.TrimSpace(url)
		}

		var m emuMachine
		if err := json.Unmarshal(sc.Bytes(), &m); err == nil && m.Endpoint != "" {
			w.machines = append(w.machines, m)
		}
	}

	if len(w.machines) < n {
		return nil, fmt.Errorf("talosemu printed %d machines, want %d; its log: %s", len(w.machines), n, filepath.Join(dir, "talosemu.log"))
	}

	go func() { _, _ = bufio.NewReader(stdout).WriteTo(discard{}) }()

	return w, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// stopProcess interrupts p and kills it if it has not stopped within 30 s.
func stopProcess(c *exec.Cmd) {
	if c.Process == nil {
		return
	}

	_ = c.Process.Signal(syscall.SIGINT)

	done := make(chan struct{})

	go func() { _ = c.Wait(); close(done) }()

	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}

// ichor runs the CLI and records what it printed.
func (w *world) ichor(ctx context.Context, args ...string) (string, error) {
	cli := w.cli
	if cli == "" {
		cli = filepath.Join(w.bin, "ichor")
	}

	cmd := exec.CommandContext(ctx, cli, args...) //nolint:gosec // our own binary
	cmd.Env = w.env

	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()

	w.mu.Lock()
	fmt.Fprintf(&w.outputs, "$ ichor %s\n%s", strings.Join(args, " "), out.String())
	w.mu.Unlock()

	if err != nil {
		return out.String(), fmt.Errorf("ichor %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}

	return out.String(), nil
}

func (w *world) mustIchor(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()

	out, err := w.ichor(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}

	return out
}

// startController starts ichor-controller against the emulated cluster with
// webhooks off (a local process cannot serve the cluster's webhooks).
func (w *world) startController() error {
	logf, err := os.OpenFile(w.ctrlLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}

	c := exec.CommandContext(context.Background(), filepath.Join(w.bin, "ichor-controller"), //nolint:gosec // our own binary
		"--enable-webhooks=false", "--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0")
	c.Env, c.Stdout, c.Stderr = w.env, logf, logf

	if err := c.Start(); err != nil {
		return err
	}

	w.ctrl = c
	cleanups = append(cleanups, func() { stopProcess(c); _ = logf.Close() })

	return nil
}

// initLocal makes a cluster of node with `ichor init --install none` and
// starts the local controller (startController) as soon as init has written
// the cluster's resources, for init waits for a controller to take the
// first control plane over; it returns once init is done.
func (w *world) initLocal(t *testing.T, ctx context.Context, clusterName, node, timeout string) {
	t.Helper()

	initErr := make(chan error, 1)

	go func() {
		_, err := w.ichor(ctx, "init", "--cluster", clusterName, "--preset", "standard", "--node", node,
			"--install", "none", "--write-kubeconfig", w.kubeconfig, "--timeout", timeout)
		initErr <- err
	}()

	testenv.EventuallyEvery(t, 5*time.Minute, time.Second, "the cluster's resources from init", func() (bool, string) {
		select {
		case err := <-initErr:
			t.Fatalf("init ended before the cluster's resources existed: %v", err)
		default:
		}

		if _, err := os.Stat(w.kubeconfig); err != nil {
			return false, "no kubeconfig yet"
		}

		_, err := w.ichor(ctx, "cluster", "get", clusterName)

		return err == nil, fmt.Sprint(err)
	})

	testenv.Must(t, w.startController())
	testenv.Must(t, <-initErr)
}

// discover adds the addresses to the cluster's discovery (`ichor cluster
// discovery add`) and waits for a pending machine at each; it returns their
// names by address.
func (w *world) discover(t *testing.T, ctx context.Context, timeout time.Duration, addrs ...string) map[string]string {
	t.Helper()

	w.mustIchor(t, ctx, append([]string{"cluster", "discovery", "add"}, addrs...)...)

	pending := map[string]string{}

	testenv.EventuallyEvery(t, timeout, 2*time.Second, fmt.Sprintf("%d pending machines", len(addrs)), func() (bool, string) {
		ms, err := w.list(ctx)
		if err != nil {
			return false, err.Error()
		}

		for _, m := range ms {
			if m.Spec.Approval.State == "pending" && slices.Contains(addrs, m.Spec.Address) {
				pending[m.Spec.Address] = m.Metadata.Name
			}
		}

		return len(pending) == len(addrs), describe(ms)
	})

	return pending
}

// waitAllReady waits until the cluster has n machines, every one Ready.
func (w *world) waitAllReady(t *testing.T, ctx context.Context, n int, timeout time.Duration, what string) {
	t.Helper()

	testenv.EventuallyEvery(t, timeout, 2*time.Second, what, func() (bool, string) {
		ms, err := w.list(ctx)
		if err != nil {
			return false, err.Error()
		}

		ready := 0

		for _, m := range ms {
			if m.ready() {
				ready++
			}
		}

		return ready == n && len(ms) == n, describe(ms)
	})
}

// machine is the part of a TalosMachine the test reads from `-o json`.
type machine struct {
	Metadata struct {
		Name              string  `json:"name"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		Role     string `json:"role"`
		Address  string `json:"address"`
		Approval struct {
			State string `json:"state"`
		} `json:"approval"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Reason string `json:"reason"`
		} `json:"conditions"`
	} `json:"status"`
}

func (m machine) ready() bool {
	for _, c := range m.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}

	return false
}

func (w *world) list(ctx context.Context) ([]machine, error) {
	out, err := w.ichor(ctx, "machine", "list", "-o", "json")
	if err != nil {
		return nil, err
	}

	var l struct {
		Items []machine `json:"items"`
	}

	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return nil, fmt.Errorf("`ichor machine list -o json` printed no machine list: %w\n%s", err, out)
	}

	return l.Items, nil
}

func describe(ms []machine) string {
	var b strings.Builder
	for _, m := range ms {
		reason := ""

		for _, c := range m.Status.Conditions {
			if c.Type == "Ready" {
				reason = c.Status + "/" + c.Reason
			}
		}

		fmt.Fprintf(&b, "  %s %s %s %s %s\n", m.Metadata.Name, m.Spec.Address, m.Spec.Role, m.Spec.Approval.State, reason)
	}

	return b.String()
}

// scenario runs the whole flow once for the package's tests.
func scenario(t *testing.T) *world {
	t.Helper()

	worldOnce.Do(func() { theWorld, worldErr = runScenario() })

	if worldErr != nil {
		t.Fatal(worldErr)
	}

	return theWorld
}

var scenarioDurations = map[string]time.Duration{}

func runScenario() (w *world, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	start := time.Now()

	w, err = startWorld()
	if err != nil {
		return nil, err
	}

	scenarioDurations["build+start"] = time.Since(start)
	first := w.machines[0].ip()

	// The console's address: a loopback port `ichor ui` forwards to the
	// in-cluster ichor-ui, the issuer of Ichor's own users.
	port, err := freePort()
	if err != nil {
		return nil, err
	}

	w.uiURL = fmt.Sprintf("https://127.0.0.1:%d", port)

	// init installs Ichor through the installer Job and waits for the
	// in-cluster controller to take the first control plane over.
	initStart := time.Now()

	// Cilium boots at the older embedded chart, so that
	// TestCiliumUpgradeAndRollback has a chart to move it to.
	if _, err := w.ichor(ctx, "init", "--cluster", cluster, "--preset", "standard", "--node", first, "--cilium-version", bootCilium,
		"--install", "manifest", "--ui-url", w.uiURL, "--write-kubeconfig", w.kubeconfig, "--timeout", "6m"); err != nil {
		return nil, fmt.Errorf("%w\nthe installer Job's log: %s", err, w.installerLog(ctx))
	}

	scenarioDurations["init --install manifest"] = time.Since(initStart)

	return w, nil
}

// cliScenario records the one run of the CLI scenario: the browser tests
// (browser_test.go, which runs first) start from the world it leaves.
var cliScenario struct {
	once   sync.Once
	passed bool
}

func TestInitDiscoverApproveRemove(t *testing.T) { approvedWorld(t) }

// approvedWorld runs the CLI scenario once for the package and returns its
// world: four Ready machines and the removed worker back as pending.
func approvedWorld(t *testing.T) *world {
	t.Helper()

	ran := false

	cliScenario.once.Do(func() {
		ran = true

		initDiscoverApproveRemove(t)

		cliScenario.passed = !t.Failed()
	})

	if !ran && !cliScenario.passed {
		t.Fatal("the CLI scenario (TestInitDiscoverApproveRemove) failed in an earlier test; this test starts from its world")
	}

	return theWorld
}

func initDiscoverApproveRemove(t *testing.T) {
	start := time.Now()
	w := scenario(t)

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	first := w.machines[0].ip()

	ms, err := w.list(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if len(ms) != 1 || ms[0].Spec.Address != first || ms[0].Spec.Role != "controlplane" || !ms[0].ready() {
		t.Fatalf("after init, want one Ready control plane at %s; got:\n%s", first, describe(ms))
	}

	others := make([]string, 0, 4)
	for _, m := range w.machines[1:] {
		others = append(others, m.ip())
	}

	w.mustIchor(t, ctx, append([]string{"cluster", "discovery", "add"}, others...)...)

	byAddr := map[string]machine{}

	testenv.EventuallyEvery(t, 2*time.Minute, 2*time.Second, "4 pending machines", func() (bool, string) {
		ms, err := w.list(ctx)
		if err != nil {
			return false, err.Error()
		}

		clear(byAddr)

		for _, m := range ms {
			if m.Spec.Approval.State == "pending" {
				byAddr[m.Spec.Address] = m
			}
		}

		return len(byAddr) == 4, describe(ms)
	})

	// The spec's role hints: machines 2 and 3 are control planes, 4 and 5 workers.
	for i, addr := range others {
		role := "controlplane"
		if i >= 2 {
			role = "worker"
		}

		w.mustIchor(t, ctx, "machine", "approve", byAddr[addr].Metadata.Name, "--role", role)
	}

	approveStart := time.Now()

	testenv.EventuallyEvery(t, 4*time.Minute, 2*time.Second, "5 Ready machines", func() (bool, string) {
		ms, err := w.list(ctx)
		if err != nil {
			return false, err.Error()
		}

		ready := 0
		for _, m := range ms {
			if m.ready() && m.Spec.Approval.State == "approved" {
				ready++
			}
		}

		return ready == 5 && len(ms) == 5, describe(ms)
	})

	scenarioDurations["approve→Ready"] = time.Since(approveStart)

	worker := byAddr[others[3]].Metadata.Name
	out := w.mustIchor(t, ctx, "node", "remove", worker, "--reboot", "--yes", "--wait", "--timeout", "3m")

	if !strings.Contains(out, "removed") {
		t.Fatalf("`ichor node remove --wait` did not say the machine was removed:\n%s", out)
	}

	testenv.EventuallyEvery(t, 3*time.Minute, 2*time.Second, "the removed worker back as pending", func() (bool, string) {
		ms, err := w.list(ctx)
		if err != nil {
			return false, err.Error()
		}

		for _, m := range ms {
			if m.Spec.Address == others[3] && m.Spec.Approval.State == "pending" && m.Metadata.DeletionTimestamp == nil {
				return true, ""
			}
		}

		return false, describe(ms)
	})

	t.Logf("durations: %v; test %s", scenarioDurations, time.Since(start).Round(time.Second))
}

// TestNoBundleSecretInOutputOrLog checks every CLI output of the scenario and
// the controller's log for every secret of the bundle, of the admin
// kubeconfig and talosconfig, and for the passphrase.
func TestNoBundleSecretInOutputOrLog(t *testing.T) {
	w := scenario(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The output lines of the commands that show things, plus what the scenario printed.
	w.mustIchor(t, ctx, "cluster", "get", cluster, "-o", "yaml")
	w.mustIchor(t, ctx, "machine", "list", "-o", "yaml")
	w.mustIchor(t, ctx, "secrets", "status", "--cluster", cluster)

	ms, err := w.list(ctx)
	if err != nil {
		t.Fatal(err)
	}

	for _, m := range ms {
		w.mustIchor(t, ctx, "machine", "get", m.Metadata.Name)

		if m.Spec.Approval.State == "approved" {
			w.mustIchor(t, ctx, "config", "effective", m.Metadata.Name)
		}
	}

	secretValues := make([]string, 0, 64)

	for _, f := range []string{"secrets.yaml", "kubeconfig", "talosconfig"} {
		path := filepath.Join(w.dir, "export-"+f)
		_ = os.Remove(path)
		w.mustIchor(t, ctx, "secrets", "export", f, "--cluster", cluster, "--out", path)

		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}

		secretValues = append(secretValues, secretsIn(string(data))...)
	}

	if len(secretValues) < 10 {
		t.Fatalf("found only %d secret values in the bundle, kubeconfig and talosconfig: the extraction is broken", len(secretValues))
	}

	secretValues = append(secretValues, passphrase)

	logs := w.podLogs(t)

	w.mu.Lock()
	outputs := w.outputs.String()
	w.mu.Unlock()

	texts := map[string]string{"the CLI's output": outputs}
	logged := map[string]bool{}

	for pod, text := range logs {
		texts["the log of pod "+pod] = text

		for _, prefix := range []string{"ichor-controller-", "ichor-ui-", "ichor-install-"} {
			if strings.HasPrefix(pod, prefix) && text != "" {
				logged[prefix] = true
			}
		}
	}

	if !strings.Contains(outputs, "ichor init") || len(logged) != 3 {
		t.Fatalf("the recorded outputs are empty, or of the controller's, the installer's and ichor-ui's pods only %v left a log: nothing was checked", logged)
	}

	for _, s := range secretValues {
		for name, text := range texts {
			if strings.Contains(text, s) {
				t.Errorf("%s holds a secret value (%d characters, starting %q)", name, len(s), s[:6])
			}
		}
	}
}

// podLogs is every log file the pod runner kept of Ichor's pods (the
// installer Job's, the controller's and ichor-ui's, each run's), by pod.
func (w *world) podLogs(t *testing.T) map[string]string {
	t.Helper()

	logs := map[string]string{}

	// <state>/<machine>/pods/<namespace>_<pod>_<uid>/logs/... (tools/talosemu/README.md).
	dirs, err := filepath.Glob(filepath.Join(w.dir, "machines", "*", "pods", icNamespace+"_*", "logs"))
	if err != nil {
		t.Fatal(err)
	}

	for _, dir := range dirs {
		pod := strings.SplitN(filepath.Base(filepath.Dir(dir)), "_", 3)[1]

		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}

			data, err := os.ReadFile(path) //nolint:gosec // the test's own state directory
			if err != nil {
				return err
			}

			logs[pod] += string(data)

			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	return logs
}

var secretLine = regexp.MustCompile(`(?m)^\s*-?\s*(key|secret|token|bootstraptoken|secretboxencryptionsecret|aescbcencryptionsecret|client-key-data):\s*(\S+)\s*$`)

// secretsIn extracts the secret values of a bundle, kubeconfig or
// talosconfig YAML: each base64 value, and for a key a distinctive line of
// the PEM it encodes.
func secretsIn(doc string) []string {
	var out []string

	for _, m := range secretLine.FindAllStringSubmatch(doc, -1) {
		v := strings.Trim(m[2], `"'`)
		if len(v) < 16 {
			continue
		}

		out = append(out, v)

		if pem, err := base64.StdEncoding.DecodeString(v); err == nil {
			for _, line := range strings.Split(string(pem), "\n") {
				if len(line) >= 40 && !strings.HasPrefix(line, "-----") {
					out = append(out, line)

					break
				}
			}
		}
	}

	return slices.Compact(out)
}
