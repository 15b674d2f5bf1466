package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// Issue 19: Ichor running inside the cluster it manages. talosemu runs the
// pods of Ichor's images as processes of the binaries this package builds
// (its pod runner: tools/talosemu/README.md), so `ichor init
// --install=manifest` installs Ichor the way it does on hardware: its
// installer Job applies the controller (admission webhooks on) and ichor-ui,
// and the in-cluster controller takes over the first control plane. The
// tests of this file use the package's one world (cli_test.go): after the
// CLI scenario it has five nodes, so two controller replicas.

const (
	// devVersion is the version of binaries built without the release's
	// -ldflags: the installer records it, and the images are tagged latest.
	devVersion = "v0.0.0-dev"
	// leaseName is the controller replicas' leader election Lease.
	leaseName = "ichor-controller.ichor.maesh.dev"
)

// binary is one of Ichor's binaries: its module and package.
type binary struct{ module, pkg string }

var binaries = map[string]binary{
	"ichor":            {"cli", "./cmd/ichor"},
	"ichor-controller": {"controller", "./cmd"},
	"ichor-installer":  {"installer", "./cmd"},
	"ichor-ui":         {"uiserver", "./cmd/ichor-ui"},
	"talosemu":         {"tools", "./cmd/talosemu"},
}

var shared struct {
	once sync.Once
	bin  string
	err  error
}

// sharedBin builds every binary of the package's worlds once, into one
// directory, and returns it.
func sharedBin() (string, error) {
	shared.once.Do(func() {
		root, err := repoRoot()
		if err != nil {
			shared.err = err

			return
		}

		dir, err := os.MkdirTemp("", "ichor-e2e-bin-")
		if err != nil {
			shared.err = err

			return
		}

		cleanups = append(cleanups, func() { _ = os.RemoveAll(dir) })
		shared.bin, shared.err = dir, build(root, dir, "ichor", "ichor-controller", "ichor-installer", "ichor-ui", "talosemu")
	})

	return shared.bin, shared.err
}

// build builds the named binaries from this tree into bin, two at a time
// (go build compiles in parallel already; this overlaps the links).
func build(root, bin string, names ...string) error {
	errs := make([]error, len(names))
	sem := make(chan struct{}, 2)

	var wg sync.WaitGroup

	for i, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()

			b := binaries[name]

			cmd := exec.CommandContext(context.Background(), "go", "build", "-o", filepath.Join(bin, name), b.pkg) //nolint:gosec // our own packages
			cmd.Dir = filepath.Join(root, b.module)

			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("building %s: %w\n%s", name, err, out)
			}
		})
	}

	wg.Wait()

	return errors.Join(errs...)
}

// installerLog is the installer Job's log, for a failure's message.
func (w *world) installerLog(ctx context.Context) string {
	out, err := w.kubectl(ctx, "logs", "-n", icNamespace, "job/"+installJobName())
	if err != nil {
		return err.Error()
	}

	return out
}

// installJobName is install.JobName of the development version.
func installJobName() string { return "ichor-install-v0-0-0-dev" }

// kubeJSON reads an object or a list through kubectl into v.
func (w *world) kubeJSON(ctx context.Context, v any, args ...string) error {
	out, err := w.kubectl(ctx, append(args, "-o", "json")...)
	if err != nil {
		return err
	}

	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}

	return nil
}

// pod is what the tests read of a pod.
type pod struct {
	Metadata struct {
		Name              string  `json:"name"`
		CreationTimestamp string  `json:"creationTimestamp"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		PodIP      string `json:"podIP"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		ContainerStatuses []struct {
			RestartCount int `json:"restartCount"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

func (p pod) ready() bool {
	if p.Metadata.DeletionTimestamp != nil {
		return false
	}

	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}

	return false
}

// pods lists the pods of an Ichor Deployment (its app.kubernetes.io/name).
func (w *world) pods(ctx context.Context, app string) ([]pod, error) {
	var l struct {
		Items []pod `json:"items"`
	}

	err := w.kubeJSON(ctx, &l, "get", "pods", "-n", icNamespace, "-l", "app.kubernetes.io/name="+app)

	return l.Items, err
}

func describePods(ps []pod) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s on %s %s ready=%v deleting=%v ip=%s\n", p.Metadata.Name, p.Spec.NodeName, p.Status.Phase, p.ready(), p.Metadata.DeletionTimestamp != nil, p.Status.PodIP)
	}

	return b.String()
}

// deployment is what the tests read of a Deployment.
type deployment struct {
	Spec struct {
		Replicas int `json:"replicas"`
	} `json:"spec"`
	Status struct {
		Replicas          int `json:"replicas"`
		AvailableReplicas int `json:"availableReplicas"`
		UpdatedReplicas   int `json:"updatedReplicas"`
	} `json:"status"`
}

// waitAvailable waits until every replica of the Deployment name is
// available and at least min are wanted; it returns the Ready pods.
func (w *world) waitAvailable(t *testing.T, ctx context.Context, name string, minReplicas int, timeout time.Duration) []pod {
	t.Helper()

	var ready []pod

	testenv.EventuallyEvery(t, timeout, 2*time.Second, fmt.Sprintf("Deployment %s with %d+ replicas, all available", name, minReplicas), func() (bool, string) {
		var d deployment
		if err := w.kubeJSON(ctx, &d, "get", "deployment", "-n", icNamespace, name); err != nil {
			return false, err.Error()
		}

		ps, err := w.pods(ctx, name)
		if err != nil {
			return false, err.Error()
		}

		ready = ready[:0]

		for _, p := range ps {
			if p.ready() {
				ready = append(ready, p)
			}
		}

		ok := d.Spec.Replicas >= minReplicas && d.Status.AvailableReplicas == d.Spec.Replicas &&
			d.Status.Replicas == d.Spec.Replicas && len(ready) == d.Spec.Replicas

		return ok, fmt.Sprintf("spec %d, status %+v; pods:\n%s", d.Spec.Replicas, d.Status, describePods(ps))
	})

	return ready
}

// podProcess is the PID of the process of this world's binary name that runs
// as pod (the pod runner sets HOSTNAME to the pod's name); 0 when there is none.
func (w *world) podProcess(name, podName string) int {
	entries, _ := os.ReadDir("/proc")
	exe := filepath.Join(w.bin, name)

	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}

		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || target != exe {
			continue
		}

		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}

		for _, kv := range strings.Split(string(env), "\x00") {
			if kv == "HOSTNAME="+podName {
				return pid
			}
		}
	}

	return 0
}

// refusedReclaim writes a MachineReclaim named name that the admission
// webhook refuses (a foreign credential that lives a day, a Secret that does
// not exist) and returns the file's path.
func (w *world) refusedReclaim(t *testing.T, name string) string {
	t.Helper()

	path := filepath.Join(w.dir, name+".yaml")
	if err := os.WriteFile(path, []byte(`apiVersion: ichor.maesh.dev/v1alpha1
kind: MachineReclaim
metadata:
  name: `+name+`
  namespace: `+icNamespace+`
spec:
  address: 192.0.2.10
  credentialsRef:
    name: e2e-absent
  ttl: 24h
`), 0o600); err != nil {
		t.Fatal(err)
	}

	return path
}

// TestInClusterInstall: `ichor init --install manifest` ran the installer
// Job; the controller and ichor-ui run as pods (processes of this tree's
// binaries) and are Ready; the IchorInstallation records the version; the
// admission webhook, called by the API server at the controller pod,
// refuses with its message; `kubectl logs` reads the controller's log
// through the kubelet API.
func TestInClusterInstall(t *testing.T) {
	start := time.Now()
	w := scenario(t)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	for _, app := range []string{"ichor-controller", "ichor-ui"} {
		ready := w.waitAvailable(t, ctx, app, 1, 3*time.Minute)

		for _, p := range ready {
			if pid := w.podProcess(app, p.Metadata.Name); pid == 0 {
				t.Fatalf("pod %s is Ready but no process of %s runs it: kwok, not the pod runner, plays it", p.Metadata.Name, filepath.Join(w.bin, app))
			}

			if !strings.HasPrefix(p.Status.PodIP, "10.") {
				t.Errorf("pod %s has address %q, not one of its Node's podCIDR", p.Metadata.Name, p.Status.PodIP)
			}
		}
	}

	// The installer Job completed, and its log says what it did.
	var job struct {
		Status struct {
			Succeeded int `json:"succeeded"`
		} `json:"status"`
	}

	if err := w.kubeJSON(ctx, &job, "get", "job", "-n", icNamespace, installJobName()); err != nil {
		t.Fatal(err)
	}

	if job.Status.Succeeded != 1 {
		t.Fatalf("the installer Job %s did not succeed: %+v", installJobName(), job.Status)
	}

	if log := w.installerLog(ctx); !strings.Contains(log, "done: Ichor "+devVersion+" is installed in "+icNamespace) ||
		!strings.Contains(log, "denied the request") {
		t.Fatalf("the installer Job's log does not say it installed Ichor and saw the webhook refuse:\n%s", log)
	}

	out, err := w.kubectl(ctx, "get", "ichorinstallation", "ichor", "-o", "jsonpath={.status.installedVersion}")
	if err != nil {
		t.Fatal(err)
	}

	if out != devVersion {
		t.Fatalf("IchorInstallation ichor: installedVersion %q, want %s", out, devVersion)
	}

	// The webhook (not the CRD's schema) refuses a reclaim credential that
	// lives a day, with its rule and its way out.
	reclaim := w.refusedReclaim(t, "e2e-refused")

	out, err = w.kubectl(ctx, "create", "--dry-run=server", "-f", reclaim)
	if err == nil {
		t.Fatalf("the API server admitted a MachineReclaim the webhook must refuse:\n%s", out)
	}

	// kubectl prints the webhook's Invalid status as its causes; the CRD's
	// schema bounds neither the TTL nor checks that a Secret exists.
	for _, want := range []string{"is invalid", "the foreign credential lives at most 1h0m0s", `Secret "e2e-absent" does not exist in namespace`} {
		if !strings.Contains(out, want) {
			t.Fatalf("the refusal lacks %q:\n%s", want, out)
		}
	}

	// kubectl logs reaches the controller's log through the kubelet API: the
	// leading replica's (a standby waits for the Lease and starts no workers;
	// an earlier test may have killed the first leader).
	testenv.EventuallyEvery(t, time.Minute, 2*time.Second, "the leading controller's log through kubectl logs", func() (bool, string) {
		leader, err := w.leaderPod(ctx)
		if err != nil {
			return false, err.Error()
		}

		out, err := w.kubectl(ctx, "logs", "-n", icNamespace, leader)
		if err != nil {
			return false, err.Error()
		}

		return strings.Contains(out, "Starting workers"), out
	})

	t.Logf("test %s", time.Since(start).Round(time.Second))
}

// uiForward is a running `ichor ui`.
type uiForward struct {
	cmd    *exec.Cmd
	url    string
	stderr *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()

	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()

	return l.b.String()
}

var consoleAt = regexp.MustCompile(`The web console is at (https://127\.0\.0\.1:[0-9]+)`)

// startUIForward starts `ichor ui` for the package (stopped after every
// test) and waits for the address it prints.
func (w *world) startUIForward(ctx context.Context) (*uiForward, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(w.bin, "ichor"), "ui") //nolint:gosec // our own binary
	cmd.Env = w.env
	f := &uiForward{cmd: cmd, stderr: &lockedBuffer{}}
	cmd.Stderr = f.stderr

	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}

	if err := cmd.Start(); err != nil {
		return nil, err
	}

	cleanups = append(cleanups, func() { stopProcess(cmd) })

	found := make(chan string, 1)

	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := consoleAt.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()

	select {
	case f.url = <-found:
		return f, nil
	case <-time.After(2 * time.Minute):
		return nil, fmt.Errorf("`ichor ui` printed no address within 2 minutes; its errors:\n%s", f.stderr.String())
	}
}

// TestUIPortForward: `ichor ui` port-forwards the address init recorded to
// the ichor-ui pod through the API server and the kubelet API, and the
// console answers through it; the pod is deleted, its ReplicaSet's new pod
// comes up, and `ichor ui` forwards to it on the same local port.
func TestUIPortForward(t *testing.T) {
	w := scenario(t)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	before := w.waitAvailable(t, ctx, "ichor-ui", 1, 3*time.Minute)
	ui := startedUI(t, w)
	f := ui.forward

	answers := func(what string) {
		t.Helper()

		testenv.EventuallyEvery(t, 2*time.Minute, time.Second, "the console through `ichor ui` "+what, func() (bool, string) {
			code, body, err := ui.get(ctx, "/")
			if err != nil {
				return false, fmt.Sprintf("%v; ichor ui's errors:\n%s", err, f.stderr.String())
			}

			return code == http.StatusOK && strings.Contains(string(body), "<html"), fmt.Sprintf("%d %.200s", code, body)
		})
	}

	answers("at first")

	old := map[string]bool{}
	for _, p := range before {
		old[p.Metadata.Name] = true
	}

	if _, err := w.kubectl(ctx, "delete", "pod", "-n", icNamespace, "-l", "app.kubernetes.io/name=ichor-ui", "--wait=false"); err != nil {
		t.Fatal(err)
	}

	// New pods of the ReplicaSet, Ready, and none of the old ones left.
	testenv.EventuallyEvery(t, 3*time.Minute, 2*time.Second, "new ichor-ui pods Ready, the old ones gone", func() (bool, string) {
		ps, err := w.pods(ctx, "ichor-ui")
		if err != nil {
			return false, err.Error()
		}

		ready := 0

		for _, p := range ps {
			if old[p.Metadata.Name] {
				return false, describePods(ps)
			}

			if p.ready() {
				ready++
			}
		}

		return ready == len(before), describePods(ps)
	})

	answers("after its pod was replaced")

	if !strings.Contains(f.stderr.String(), "forwarding to another ichor-ui pod") {
		t.Fatalf("`ichor ui` did not say it re-established the forward:\n%s", f.stderr.String())
	}
}

// operation is what the tests read of a TalosOperation.
type operation struct {
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

// leaseHolder is the holder identity of the controllers' leader Lease.
func (w *world) leaseHolder(ctx context.Context) (string, error) {
	return w.kubectl(ctx, "get", "lease", "-n", icNamespace, leaseName, "-o", "jsonpath={.spec.holderIdentity}")
}

// leaderPod is the controller pod whose current run acquired the Lease (its
// log says so). The Lease's holder identity cannot say: it is the host name
// (os.Hostname) and a UUID, and the pod runner's processes share the host's
// name (no UTS namespace; tools/talosemu/README.md).
func (w *world) leaderPod(ctx context.Context) (string, error) {
	ps, err := w.pods(ctx, "ichor-controller")
	if err != nil {
		return "", err
	}

	var leaders []string

	for _, p := range ps {
		if p.Metadata.DeletionTimestamp != nil {
			continue
		}

		out, err := w.kubectl(ctx, "logs", "-n", icNamespace, p.Metadata.Name)
		if err != nil {
			return "", err
		}

		if strings.Contains(strings.ToLower(out), "successfully acquired lease") {
			leaders = append(leaders, p.Metadata.Name)
		}
	}

	if len(leaders) != 1 {
		return "", fmt.Errorf("%d controller pods say they acquired the Lease (%v); pods:\n%s", len(leaders), leaders, describePods(ps))
	}

	return leaders[0], nil
}

const rebootRPC = "/machine.MachineService/Reboot"

// TestLeaderHandover: with five nodes, the controller runs two replicas. A
// node reboot of a worker starts; once its Reboot call is sent, the leading
// controller's process is killed (SIGKILL); another replica takes the
// Lease, the operation completes, and the worker got exactly one Reboot
// (the emulator's RPC counters): the recorded step was not sent again.
func TestLeaderHandover(t *testing.T) {
	w := approvedWorld(t)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	name, worker := w.readyWorker(t, ctx)

	// Two schedulable nodes: the controller follows with two replicas.
	w.waitAvailable(t, ctx, "ichor-controller", 2, 3*time.Minute)

	// The worker's reboot takes long enough to kill the leader while the
	// operation waits for it.
	if err := w.controlPut(ctx, "/machines/"+worker.Name+"/durations", `{"reboot":"15s","boot":"5s"}`); err != nil {
		t.Fatal(err)
	}

	before, err := w.rpcs(ctx, worker.Name)
	if err != nil {
		t.Fatal(err)
	}

	out := w.mustIchor(t, ctx, "node", "reboot", name, "--yes")

	m := regexp.MustCompile(`Started operation (\S+)\.`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("`ichor node reboot` did not name its operation:\n%s", out)
	}

	op := m[1]

	testenv.EventuallyEvery(t, 3*time.Minute, 500*time.Millisecond, "the worker's Reboot call", func() (bool, string) {
		c, err := w.rpcs(ctx, worker.Name)
		if err != nil {
			return false, err.Error()
		}

		return c[rebootRPC] > before[rebootRPC], fmt.Sprintf("%v", c)
	})

	identity, err := w.leaseHolder(ctx)
	if err != nil {
		t.Fatal(err)
	}

	leader, err := w.leaderPod(ctx)
	if err != nil {
		t.Fatal(err)
	}

	pid := w.podProcess("ichor-controller", leader)
	if pid == 0 {
		t.Fatalf("no process runs the leading controller pod %s", leader)
	}

	var o operation
	if err := w.kubeJSON(ctx, &o, "get", "talosoperation", "-n", icNamespace, op); err != nil {
		t.Fatal(err)
	}

	if o.Status.Phase == "Succeeded" || o.Status.Phase == "Failed" {
		t.Fatalf("operation %s already ended (%s) before the leader was killed: nothing is handed over", op, o.Status.Phase)
	}

	// The process dies mid-operation, and its pod goes with it (a force
	// delete, as of a node gone away), so its container does not start
	// again in its place: another replica takes over.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	killed := time.Now()

	if _, err := w.kubectl(ctx, "delete", "pod", "-n", icNamespace, leader, "--grace-period=0", "--force", "--wait=false"); err != nil {
		t.Fatal(err)
	}

	testenv.EventuallyEvery(t, 2*time.Minute, time.Second, "another controller holding the Lease", func() (bool, string) {
		id, err := w.leaseHolder(ctx)
		if err != nil {
			return false, err.Error()
		}

		return id != "" && id != identity, "holder " + id
	})

	handover := time.Since(killed)

	newLeader, err := w.leaderPod(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if newLeader == leader {
		t.Fatalf("the killed pod %s holds the Lease again", leader)
	}

	testenv.EventuallyEvery(t, 4*time.Minute, 2*time.Second, "operation "+op+" Succeeded", func() (bool, string) {
		var o operation
		if err := w.kubeJSON(ctx, &o, "get", "talosoperation", "-n", icNamespace, op); err != nil {
			return false, err.Error()
		}

		if o.Status.Phase == "Failed" {
			t.Fatalf("operation %s failed after the handover", op)
		}

		return o.Status.Phase == "Succeeded", o.Status.Phase
	})

	after, err := w.rpcs(ctx, worker.Name)
	if err != nil {
		t.Fatal(err)
	}

	if n := after[rebootRPC] - before[rebootRPC]; n != 1 {
		t.Fatalf("the worker got %d Reboot calls for one node reboot (a replica repeated the recorded step): %v", n, after)
	}

	t.Logf("killed leader %s (pid %d); %s took the Lease %s later; the operation succeeded with one Reboot", leader, pid, newLeader, handover.Round(time.Second))
}

// controlPut sends a PUT with a JSON body to talosemu's control API.
func (w *world) controlPut(ctx context.Context, path, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, w.control+path, strings.NewReader(body))
	if err != nil {
		return err
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}

	defer func() { _ = resp.Body.Close() }()

	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("PUT %s: %s", path, resp.Status)
	}

	return nil
}

// readyWorker is an approved, Ready worker: its TalosMachine's name and its
// emulated machine. The scenarios before may each have removed a worker
// (it comes back pending), so it approves a pending one when none is.
func (w *world) readyWorker(t *testing.T, ctx context.Context) (string, emuMachine) {
	t.Helper()

	byIP := map[string]emuMachine{}
	for _, m := range w.machines {
		byIP[m.ip()] = m
	}

	var (
		name    string
		em      emuMachine
		pending string
	)

	testenv.EventuallyEvery(t, 5*time.Minute, 2*time.Second, "a Ready worker", func() (bool, string) {
		ms, err := w.list(ctx)
		if err != nil {
			return false, err.Error()
		}

		for _, m := range ms {
			switch {
			case m.Metadata.DeletionTimestamp != nil:
			case m.Spec.Role == "worker" && m.Spec.Approval.State == "approved" && m.ready():
				name, em = m.Metadata.Name, byIP[m.Spec.Address]

				return em.Name != "", ""
			case m.Spec.Approval.State == "pending" && pending == "":
				pending = m.Metadata.Name
				if _, err := w.ichor(ctx, "machine", "approve", pending, "--role", "worker"); err != nil {
					return false, err.Error()
				}
			}
		}

		return false, describe(ms)
	})

	return name, em
}
