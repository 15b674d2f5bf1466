// Package scale measures ichor-controller, the real binary as a separate
// process, managing one cluster of many emulated machines: its memory and
// CPU, the API writes it makes when nothing changes, and how long a
// cluster-wide change takes to reach every machine. Only benchmarks live
// here (`go tool task bench:scale`); nothing runs in the default test set.
package scale

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/lock"
	"github.com/maeshinshin/ichor/controller/internal/controller/talosmachine"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// controllerUser is the identity the controller process authenticates as;
// the API server's audit log records its writes under it.
const controllerUser = "ichor-controller"

// leaderElectionLease is the controller's leader election Lease
// (controller/cmd leaderElectionID); leaderKey counts its renewals apart.
const (
	leaderElectionLease = "ichor-controller.ichor.maesh.dev"
	leaderKey           = "leases (leader election)"
)

// The world's namespace and cluster.
const (
	namespace   = "scale"
	clusterName = "scale"
)

// auditPolicy records one line per write request of the controller's user
// and nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: [` + controllerUser + `]
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
`

// settings are the benchmark's knobs, from the environment.
type settings struct {
	// machines is the cluster's size: one control plane, the rest workers.
	machines int
	// idle is how long the controller is watched with nothing changing.
	idle time.Duration
	// settle is the wait between provisioning and the idle window.
	settle time.Duration
	// heartbeat is the emulated kubelets' lease renewal.
	heartbeat time.Duration
}

func readSettings(b *testing.B) settings {
	s := settings{idle: 6 * time.Minute}

	// `go tool task bench`'s -bench . would start a thousand machines: the
	// measurement runs only when asked for by size (`go tool task bench:scale`).
	v := os.Getenv("ICHOR_SCALE_MACHINES")
	if v == "" {
		b.Skip("ICHOR_SCALE_MACHINES is not set: `go tool task bench:scale` runs this measurement")
	}

	n, err := strconv.Atoi(v)
	if err != nil || n < 2 {
		b.Fatalf("ICHOR_SCALE_MACHINES=%q: want a number of at least 2", v)
	}

	s.machines = n

	if v := os.Getenv("ICHOR_SCALE_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			b.Fatalf("ICHOR_SCALE_IDLE=%q: want a duration of at least 1m", v)
		}

		s.idle = d
	}

	// The first round of looks after provisioning is not the steady state:
	// each machine's first drift look renders (the render provisioning made
	// was another reconciler's), and the fleet's first looks were scheduled
	// as provisioning ended. It lasts a drift period, stretched by the pace
	// of looks for a large fleet, plus its jitter (a fifth); a minute more.
	s.settle = time.Minute + 6*max(talosmachine.DefaultDriftInterval, time.Duration(float64(s.machines)/machinestate.DefaultLookRate*float64(time.Second)))/5

	if v := os.Getenv("ICHOR_SCALE_SETTLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			b.Fatalf("ICHOR_SCALE_SETTLE=%q: want a duration", v)
		}

		s.settle = d
	}

	// Each emulated kubelet's heartbeat is four requests to the emulated
	// cluster's one API server on this same host: N/100 seconds keeps that
	// at 400 requests a second whatever N is (a real kubelet's is 10 s).
	s.heartbeat = max(5*time.Second, time.Duration(s.machines/100)*time.Second)

	return s
}

// BenchmarkScale provisions a cluster of ICHOR_SCALE_MACHINES emulated
// machines with the real ichor-controller binary, then reports the first
// round of looks after provisioning (ICHOR_SCALE_SETTLE, by default a drift
// period stretched by the pace, and a minute), its steady state over
// ICHOR_SCALE_IDLE (default 6 minutes, longer than the drift period) and the convergence of a cluster-wide sysctl patch
// (no reboot). Run it with -benchtime 1x: one run is the measurement.
func BenchmarkScale(b *testing.B) {
	s := readSettings(b)
	ctx := context.Background()
	dir := b.TempDir()

	// The management API server (a real kube-apiserver) with an audit log.
	policy := filepath.Join(dir, "audit-policy.yaml")
	auditLog := filepath.Join(dir, "audit.log")
	testenv.Must(b, os.WriteFile(policy, []byte(auditPolicy), 0o600))

	scheme := runtime.NewScheme()
	testenv.Must(b, clientgoscheme.AddToScheme(scheme))
	testenv.Must(b, ichorv1alpha1.AddToScheme(scheme))

	env, err := testenv.Start(testenv.Options{Scheme: scheme, KubeAPIServerFlags: map[string]string{
		"audit-policy-file": policy, "audit-log-path": auditLog, "audit-log-format": "json", "audit-log-maxsize": "0",
	}})
	testenv.Must(b, err)
	b.Cleanup(func() { _ = env.Stop() })

	k := env.Client

	// The emulated machines: cp-1 runs the cluster's Kubernetes.
	spec := &talosemu.Spec{
		Subnet:   "127.50.0.0/16",
		Machines: []talosemu.MachineSpec{{Name: testworld.FirstControlPlane, Role: talosemu.RoleHintControlPlane}},
		Durations: talosemu.Durations{
			Install: talosemu.Duration(200 * time.Millisecond), Reboot: talosemu.Duration(200 * time.Millisecond), Boot: talosemu.Duration(100 * time.Millisecond),
		},
	}
	names := []string{testworld.FirstControlPlane}

	for i := 1; i < s.machines; i++ {
		name := fmt.Sprintf("w-%04d", i)
		names = append(names, name)
		spec.Machines = append(spec.Machines, talosemu.MachineSpec{Name: name, Role: talosemu.RoleHintWorker})
	}

	assets, err := testenv.AssetsDir()
	testenv.Must(b, err)

	// The controller, built from this tree; its pods in the emulated cluster
	// (the CNI Job's) run as processes of the same binary.
	bin := buildController(b, dir)

	world, err := talosemu.Start(ctx, spec, filepath.Join(dir, "machines"), talosemu.Options{
		Kubernetes: true, KubeAssets: assets, SingleAPIServer: true, KubeletHeartbeat: s.heartbeat,
		PodBinDir: filepath.Dir(bin), PodSubnet: "127.251.0.0/16",
	})
	testenv.Must(b, err)
	b.Cleanup(world.Close)

	bun := newCluster(b, k, world)

	// The controller as its own process.
	ctrlProc := startController(b, env, dir, bin)
	servePprof(b, ctrlProc)

	// Provisioning: every machine created as discovery and approval leave
	// it, then provisioned by the controller.
	provStart := time.Now()
	cl := testworld.Cluster{Client: k, World: world, Bundle: bun, Namespace: namespace, Name: clusterName, Machines: names}
	testenv.Must(b, cl.Provision(ctx, provStart.Add(10*time.Minute+time.Duration(s.machines)*time.Second)))
	provisioned := time.Since(provStart)
	b.Logf("%d machines provisioned and Ready in %s", s.machines, provisioned.Round(time.Second))

	// Steady state: the first round of looks after provisioning ends first.
	settleStart, settleCPU := time.Now(), ctrlProc.cpu(b)
	time.Sleep(s.settle)
	b.Logf("the first %s after provisioning (the first round of looks): CPU %.2f%% of a core",
		s.settle.Round(time.Second), 100*(ctrlProc.cpu(b)-settleCPU).Seconds()/time.Since(settleStart).Seconds())

	idleStart, cpuStart := time.Now(), ctrlProc.cpu(b)
	emRPC, emByMethod := rpcTotal(world), rpcByMethod(world)
	var rssMax uint64

	for deadline := idleStart.Add(s.idle); time.Now().Before(deadline); time.Sleep(10 * time.Second) {
		rssMax = max(rssMax, ctrlProc.memory(b).rss)
	}

	idleEnd, cpuEnd := time.Now(), ctrlProc.cpu(b)

	ctrlProc.profiles(b)
	mem := ctrlProc.memory(b)
	idleRPC := rpcTotal(world) - emRPC
	writes := countWrites(b, auditLog, idleStart, idleEnd)
	window := idleEnd.Sub(idleStart)
	cpuShare := (cpuEnd - cpuStart).Seconds() / window.Seconds()
	perHour := func(n int) float64 { return float64(n) * float64(time.Hour) / float64(window) / float64(s.machines) }

	b.Logf("idle %s: RSS %d MiB (max %d, peak %d), CPU %.2f%% of a core, %d writes (%s): %.3f per machine per hour, %.3f without the leader election's; %d Talos calls (%.2f per machine per minute)",
		window.Round(time.Second), mem.rss>>20, rssMax>>20, mem.peak>>20, 100*cpuShare, writes.total(), writes,
		perHour(writes.total()), perHour(writes.perMachine()), idleRPC, float64(idleRPC)/window.Minutes()/float64(s.machines))
	b.Logf("idle Talos calls by method: %s", rpcDelta(emByMethod, rpcByMethod(world)))

	// A cluster-wide change that needs no reboot.
	before := appliedHashes(b, k)
	convStart := time.Now()
	applies := rpcCount(world, "/machine.MachineService/ApplyConfiguration")

	testenv.Must(b, k.Create(ctx, &ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "scale-sysctl"},
		Spec: ichorv1alpha1.TalosConfigPatchSpec{
			ClusterName: clusterName, Layer: ichorv1alpha1.LayerCluster,
			Documents: []mirror.PatchDocument{{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"net.core.somaxconn": "4096"}}}},
		},
	}))

	testenv.EventuallyEvery(b, 10*time.Minute+time.Duration(s.machines)*200*time.Millisecond, 2*time.Second, "every machine applied the patch",
		func() (bool, string) { return converged(b, k, before) })

	converge := time.Since(convStart)
	convApplies := rpcCount(world, "/machine.MachineService/ApplyConfiguration") - applies
	convWrites := countWrites(b, auditLog, convStart, time.Now())

	b.Logf("cluster patch converged on %d machines in %s: %d ApplyConfiguration calls, %d writes (%s)",
		s.machines, converge.Round(100*time.Millisecond), convApplies, convWrites.total(), convWrites)

	b.ReportMetric(float64(s.machines), "machines")
	b.ReportMetric(provisioned.Seconds(), "provision-s")
	b.ReportMetric(float64(mem.rss)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(mem.peak)/(1<<20), "peak-rss-MiB")
	b.ReportMetric(100*cpuShare, "idle-cpu-%")
	b.ReportMetric(perHour(writes.perMachine()), "idle-writes/machine/h")
	b.ReportMetric(perHour(writes.total()), "idle-writes-all/machine/h")
	b.ReportMetric(converge.Seconds(), "converge-s")
	b.ReportMetric(float64(convApplies)/float64(s.machines), "applies/machine")
}

// newCluster creates the bundle Secret, Ichor's namespace and the TalosCluster
// whose endpoint is cp-1, with the default Cilium: its pods are kwok's, and
// the hand-over to Ichor's Helm release runs as the CNI Job's pod, a process
// of the ichor-controller binary (the emulator's pod runner).
func newCluster(b *testing.B, k client.Client, world *talosemu.World) *secrets.Bundle {
	b.Helper()

	ctx := context.Background()

	bun, err := bundle.Generate(secrets.NewClock(), "v1.14")
	testenv.Must(b, err)

	cp, err := world.Machine(testworld.FirstControlPlane)
	testenv.Must(b, err)

	c := testenv.TalosCluster(namespace, clusterName)
	c.Spec.Endpoint = ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeNode, Host: cp.IP()}

	sec, err := bundle.Secret(namespace, c.Spec.SecretsBundleRef, bun)
	testenv.Must(b, err)

	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lock.DefaultNamespace}},
		sec, c,
	} {
		testenv.Must(b, k.Create(ctx, obj))
	}

	return bun
}

// process is the controller's process.
type process struct {
	cmd *exec.Cmd
	log string
	// pprof is the address of its pprof endpoints, when ICHOR_SCALE_PROFILES
	// asks for profiles.
	pprof string
}

// servePprof serves this process's pprof endpoints (the emulator's) on
// loopback when ICHOR_SCALE_PROFILES asks for profiles, and says on stderr,
// at once, where both processes' endpoints are, to look while it runs.
func servePprof(b *testing.B, ctrl *process) {
	b.Helper()

	if os.Getenv("ICHOR_SCALE_PROFILES") == "" {
		return
	}

	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	testenv.Must(b, err)

	// The handlers on a mux of their own: importing net/http/pprof for its
	// side effect would put them on the default mux of every server.
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)

	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	go func() { _ = srv.Serve(lis) }()

	b.Cleanup(func() { _ = srv.Close() })

	fmt.Fprintf(os.Stderr, "scale: pprof of the emulator and this test at http://%s/debug/pprof/, of the controller at http://%s/debug/pprof/\n",
		lis.Addr(), ctrl.pprof)
}

// profiles writes the controller's heap profile and a 30-second CPU
// profile, both idle, into $ICHOR_SCALE_PROFILES (`go tool pprof FILE`).
func (p *process) profiles(b *testing.B) {
	b.Helper()

	dir := os.Getenv("ICHOR_SCALE_PROFILES")
	if dir == "" {
		return
	}

	testenv.Must(b, os.MkdirAll(dir, 0o750))

	for file, path := range map[string]string{"heap.pprof": "/debug/pprof/heap", "cpu.pprof": "/debug/pprof/profile?seconds=30"} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+p.pprof+path, nil)
		testenv.Must(b, err)

		resp, err := http.DefaultClient.Do(req)
		testenv.Must(b, err)

		data, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()

		testenv.Must(b, err)
		testenv.Must(b, os.WriteFile(filepath.Join(dir, file), data, 0o600))
	}

	b.Logf("profiles in %s", dir)
}

// buildController builds ichor-controller from this tree into dir/bin.
func buildController(b *testing.B, dir string) string {
	b.Helper()

	root, err := testenv.RepoRoot()
	testenv.Must(b, err)

	bin := filepath.Join(dir, "bin", "ichor-controller")
	build := exec.CommandContext(context.Background(), "go", "build", "-o", bin, "./cmd") //nolint:gosec // our own package, into the test's directory
	build.Dir = filepath.Join(root, "controller")

	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building ichor-controller: %v\n%s", err, out)
	}

	return bin
}

// startController starts the controller with the identity controllerUser,
// webhooks off (a local process serves no admission) and leader election
// on, as in a cluster.
func startController(b *testing.B, env *testenv.Env, dir, bin string) *process {
	b.Helper()

	kc, err := env.UserKubeconfig(controllerUser, "system:masters")
	testenv.Must(b, err)

	kubeconfig := filepath.Join(dir, "controller.kubeconfig")
	testenv.Must(b, os.WriteFile(kubeconfig, kc, 0o600))

	p := &process{log: filepath.Join(dir, "controller.log")}
	logf, err := os.Create(p.log)
	testenv.Must(b, err)

	args := []string{
		"--kubeconfig", kubeconfig, "--enable-webhooks=false", "--leader-elect=true", "--namespace", lock.DefaultNamespace,
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
	}

	if os.Getenv("ICHOR_SCALE_PROFILES") != "" {
		lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		testenv.Must(b, err)

		p.pprof = lis.Addr().String()
		_ = lis.Close()

		args = append(args, "--pprof-bind-address", p.pprof)
	}

	p.cmd = exec.CommandContext(context.Background(), bin, args...) //nolint:gosec // our own binary
	p.cmd.Stdout, p.cmd.Stderr = logf, logf

	testenv.Must(b, p.cmd.Start())
	b.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
		_ = logf.Close()

		if b.Failed() {
			tail, _ := os.ReadFile(p.log)
			if len(tail) > 8<<10 {
				tail = tail[len(tail)-8<<10:]
			}

			b.Logf("the controller's log ends:\n%s", tail)
		}
	})

	return p
}

// cpu is the CPU time the process used so far (user and system).
func (p *process) cpu(b *testing.B) time.Duration {
	b.Helper()

	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	testenv.Must(b, err)

	// The fields after the command name, which is in parentheses.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	// utime and stime are fields 14 and 15 of proc(5), 12 and 13 here, in
	// clock ticks of 100 per second (sysconf(_SC_CLK_TCK) on Linux).
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)

	return time.Duration(utime+stime) * 10 * time.Millisecond
}

type memory struct{ rss, peak uint64 }

// memory is the process's resident set, now and at its peak.
func (p *process) memory(b *testing.B) memory {
	b.Helper()

	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	testenv.Must(b, err)

	defer func() { _ = f.Close() }()

	var m memory

	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}

		kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)

		switch key {
		case "VmRSS":
			m.rss = kb << 10
		case "VmHWM":
			m.peak = kb << 10
		}
	}

	return m
}

// writes counts the controller's write requests by resource (and
// subresource).
type writes map[string]int

func (w writes) total() int {
	n := 0
	for _, v := range w {
		n += v
	}

	return n
}

// perMachine is the writes that grow with the machines: all but the
// leader election's renewals (one every 2 s, controller-runtime's retry
// period, whatever the cluster's size).
func (w writes) perMachine() int { return w.total() - w[leaderKey] }

func (w writes) String() string {
	keys := slices.Sorted(maps.Keys(w))
	parts := make([]string, 0, len(keys))

	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, w[k]))
	}

	return strings.Join(parts, ", ")
}

// auditEvent is the part of an audit.k8s.io/v1 Event the count reads.
type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
}

// countWrites reads the audit log for the controller's writes received
// between from and to.
func countWrites(b *testing.B, path string, from, to time.Time) writes {
	b.Helper()

	f, err := os.Open(path)
	testenv.Must(b, err)

	defer func() { _ = f.Close() }()

	out := writes{}

	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)

	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			b.Fatalf("audit log: %v", err)
		}

		if e.Stage != "ResponseComplete" || e.User.Username != controllerUser || e.RequestReceived.Before(from) || e.RequestReceived.After(to) {
			continue
		}

		key := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			key += "/" + e.ObjectRef.Subresource
		}

		if key == "leases" && e.ObjectRef.Name == leaderElectionLease {
			key = leaderKey
		}

		out[key]++
	}

	testenv.Must(b, sc.Err())

	return out
}

// rpcTotal is every Talos API call the emulated machines answered so far.
func rpcTotal(world *talosemu.World) int {
	n := 0

	for _, m := range world.Machines() {
		for _, c := range m.RPCCounts() {
			n += c
		}
	}

	return n
}

// rpcByMethod is rpcTotal by method.
func rpcByMethod(world *talosemu.World) map[string]int {
	out := map[string]int{}

	for _, m := range world.Machines() {
		for method, c := range m.RPCCounts() {
			out[method] += c
		}
	}

	return out
}

// rpcDelta lists the calls made between two rpcByMethod counts, most first.
func rpcDelta(before, after map[string]int) string {
	type count struct {
		method string
		n      int
	}

	var out []count

	for method, n := range after {
		if d := n - before[method]; d > 0 {
			out = append(out, count{method, d})
		}
	}

	slices.SortFunc(out, func(a, b count) int { return cmp.Or(b.n-a.n, strings.Compare(a.method, b.method)) })

	parts := make([]string, len(out))
	for i, c := range out {
		parts[i] = fmt.Sprintf("%s %d", c.method, c.n)
	}

	return strings.Join(parts, ", ")
}

func rpcCount(world *talosemu.World, method string) int {
	n := 0
	for _, m := range world.Machines() {
		n += m.RPCCounts()[method]
	}

	return n
}

// appliedHashes are the machines' applied configuration hashes.
func appliedHashes(b *testing.B, k client.Client) map[string]string {
	b.Helper()

	var list ichorv1alpha1.TalosMachineList
	testenv.Must(b, k.List(context.Background(), &list, client.InNamespace(namespace)))

	out := make(map[string]string, len(list.Items))
	for _, m := range list.Items {
		out[m.Name] = m.Status.AppliedConfigHash
	}

	return out
}

// converged says whether every machine applied a render other than the
// one in before, and is Ready.
func converged(b *testing.B, k client.Client, before map[string]string) (bool, string) {
	b.Helper()

	var list ichorv1alpha1.TalosMachineList
	testenv.Must(b, k.List(context.Background(), &list, client.InNamespace(namespace)))

	var pending []string

	for _, m := range list.Items {
		s := m.Status
		if s.AppliedConfigHash == before[m.Name] || s.AppliedConfigHash != s.RenderedConfigHash ||
			!apimeta.IsStatusConditionTrue(s.Conditions, ichorv1alpha1.ReadyCondition) {
			pending = append(pending, m.Name)
		}
	}

	if len(pending) > 0 {
		return false, fmt.Sprintf("%d machines not converged, first %s", len(pending), pending[0])
	}

	return true, ""
}
