package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// The loopback subnets of the adoption's worlds (no other test uses them).
const (
	adoptSubnet          = "127.0.207.0/24"
	adoptInstallSubnet   = "127.0.208.0/24"
	adoptInstallPodRange = "127.208.0.0/24"
	adoptAddSubnet       = "127.0.212.0/24"
)

// stop stops the world's controller and emulator, so that a finished test
// leaves no load behind for the package's next ones.
func (w *world) stop() {
	if w.ctrl != nil {
		stopProcess(w.ctrl)
	}

	stopProcess(w.emu)
}

// makeTalosctlCluster makes a cluster of cp and the workers with the real
// talosctl (gen secrets, gen config, apply-config --insecure, bootstrap),
// as a person does, and returns the talosconfig and the secrets file.
func makeTalosctlCluster(ctx context.Context, t *testing.T, name string, cp emuMachine, workers ...emuMachine) (tc, secretsFile string) {
	t.Helper()

	return makeTalosctlClusterWith(ctx, t, name, []emuMachine{cp}, workers)
}

// makeTalosctlClusterWith makes a cluster of the control planes cps (the
// first is the endpoint and is bootstrapped) and the workers, with genArgs
// added to `talosctl gen config` (config patches).
func makeTalosctlClusterWith(ctx context.Context, t *testing.T, name string, cps, workers []emuMachine, genArgs ...string) (tc, secretsFile string) {
	t.Helper()

	cp := cps[0]
	dir := t.TempDir()
	secretsFile, tc = filepath.Join(dir, "secrets.yaml"), filepath.Join(dir, "talosconfig")

	mustTalosctl(ctx, t, "", "gen", "secrets", "-o", secretsFile)
	mustTalosctl(ctx, t, "", slices.Concat([]string{"gen", "config", name, "https://" + cp.ip() + ":6443", "--with-secrets", secretsFile,
		"--install-disk", "/dev/nvme0n1", "--kubernetes-version", "1.37.2", "-o", dir}, genArgs)...)

	for _, m := range cps {
		mustTalosctl(ctx, t, "", "apply-config", "--insecure", "--nodes", m.ip(), "--file", filepath.Join(dir, "controlplane.yaml"))
	}

	for _, m := range workers {
		mustTalosctl(ctx, t, "", "apply-config", "--insecure", "--nodes", m.ip(), "--file", filepath.Join(dir, "worker.yaml"))
	}

	testenv.EventuallyEvery(t, 3*time.Minute, time.Second, "talosctl bootstrap", func() (bool, string) {
		out, err := talosctl(ctx, t, tc, "--endpoints", cp.ip(), "--nodes", cp.ip(), "bootstrap")

		return err == nil, out
	})

	return tc, secretsFile
}

// heldMachine is what the adoption test reads of a TalosMachine.
type heldMachine struct {
	Metadata struct {
		Name        string            `json:"name"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Role     string `json:"role"`
		Address  string `json:"address"`
		Identity struct {
			UUID string `json:"uuid"`
		} `json:"identity"`
	} `json:"spec"`
	Status struct {
		AppliedConfigHash string   `json:"appliedConfigHash"`
		DriftPaths        []string `json:"driftPaths"`
		Conditions        []struct {
			Type, Status, Reason, Message string
		} `json:"conditions"`
	} `json:"status"`
}

func (m heldMachine) condition(t string) (status, reason string) {
	for _, c := range m.Status.Conditions {
		if c.Type == t {
			return c.Status, c.Reason
		}
	}

	return "", ""
}

func (m heldMachine) message(t string) string {
	for _, c := range m.Status.Conditions {
		if c.Type == t {
			return c.Message
		}
	}

	return ""
}

// waitHeld waits until the cluster's n machines are confirmed by the
// controller (Provisioned) and held by the adoption (AdoptionHeld, naming
// the release).
func (w *world) waitHeld(t *testing.T, cluster string, n int) {
	t.Helper()

	testenv.EventuallyEvery(t, 5*time.Minute, 2*time.Second, fmt.Sprintf("%d machines provisioned and held", n), func() (bool, string) {
		ms, err := w.heldMachines(context.Background())
		if err != nil || len(ms) != n {
			return false, fmt.Sprintf("%d machines: %v", len(ms), err)
		}

		var states []string

		ok := true

		for _, m := range ms {
			prov, _ := m.condition("Provisioned")
			held, _ := m.condition("AdoptionHeld")
			ok = ok && prov == "True" && held == "True" && m.Metadata.Annotations["ichor.maesh.dev/hold-apply"] == "ichor-adopt" &&
				strings.Contains(m.message("AdoptionHeld"), "ichor adopt --release --cluster "+cluster)
			states = append(states, fmt.Sprintf("%s provisioned=%s held=%s drift=%v", m.Metadata.Name, prov, held, m.Status.DriftPaths))
		}

		return ok, strings.Join(states, "; ")
	})
}

func (w *world) heldMachines(ctx context.Context) ([]heldMachine, error) {
	var l struct {
		Items []heldMachine `json:"items"`
	}

	err := w.kubeJSON(ctx, &l, "get", "talosmachines", "-n", "ichor-system")

	return l.Items, err
}

// TestAdoptTalosctlFlannel: a cluster made with the real talosctl (gen
// secrets, gen config, apply-config --insecure, bootstrap; Talos's own
// flannel, no Ichor involved), one control plane and one worker, is adopted
// with its CNI left as it runs: the write stores the bundle, writes the
// cluster's resources with every machine held and sends no configuration; the
// controller confirms each node and reports it held; the release lifts the
// holds one at a time after the live check, the controller applies each
// render and every machine is Ready; then a patch rolls out to the two. From
// the controller's start to the end of the release the controller is killed
// with SIGKILL at random moments: no configuration reaches a held node all
// the same, and the release completes. Writing
// an adoption that would take Cilium over is refused before anything is
// written, and a second write run continues without a change.
func TestAdoptTalosctlFlannel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	w, err := startWorldIn(adoptSubnet, 2, 1, "")
	testenv.Must(t, err)
	t.Cleanup(w.stop)

	cp, wk := w.machines[0], w.machines[1]
	// The cluster, as a person makes it with talosctl.
	tc, secretsFile := makeTalosctlCluster(ctx, t, "theirs", cp, wk)
	dir := filepath.Dir(tc)

	before := map[string]int{}

	for _, m := range w.machines {
		c, err := w.rpcs(ctx, m.Name)
		testenv.Must(t, err)
		before[m.Name] = c[applyRPC]
	}

	flags := []string{"--talosconfig", tc, "--node", cp.ip(), "--node", wk.ip(), "--secrets-bundle", secretsFile}

	// Without --cni-unmanaged the flannel cluster is refused, with the way out.
	if out, err := w.ichor(ctx, slices.Concat([]string{"adopt", "--plan"}, flags)...); err == nil || !strings.Contains(out, "add --cni-unmanaged") {
		t.Fatalf("the plan of a flannel cluster without --cni-unmanaged: %v\n%s", err, out)
	}

	out := w.mustIchor(t, ctx, slices.Concat([]string{"adopt", "--plan", "--cni-unmanaged"}, flags)...)
	for _, want := range []string{"Adoption plan for cluster theirs", "left as it is (spec.cni.preset: unmanaged)", "adoptable", "run the same command without --plan"} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan does not say %q:\n%s", want, out)
		}
	}

	if _, err := os.Stat(w.kubeconfig); err == nil {
		t.Fatal("the plan wrote the kubeconfig")
	}

	write := slices.Concat([]string{"adopt", "--cni-unmanaged", "--install", "none", "--write-kubeconfig", w.kubeconfig, "--yes"}, flags)

	out = w.mustIchor(t, ctx, write...)
	for _, want := range []string{"Cluster theirs is adopted and held", "ichor adopt --release --cluster theirs", "ichor cluster rotate-ca theirs"} {
		if !strings.Contains(out, want) {
			t.Errorf("the write does not say %q:\n%s", want, out)
		}
	}

	// A second run continues: everything exists and is the adoption's.
	w.mustIchor(t, ctx, write...)

	if _, err := os.Stat(filepath.Join(w.dir, "home", "clusters", "theirs", "secrets.yaml.age")); err != nil {
		t.Errorf("the bundle is not in the store: %v", err)
	}

	if out, err := w.kubectl(ctx, "get", "taloscluster", "theirs", "-n", "ichor-system",
		"-o", `jsonpath={.metadata.annotations.ichor\.maesh\.dev/adopted} {.spec.cni.preset} {.status.conditions[?(@.type=="CARotationAdvised")].status}`); err != nil ||
		strings.TrimSpace(out) != "true unmanaged True" {
		t.Errorf("the TalosCluster (adopted annotation, preset, CARotationAdvised): %q %v", out, err)
	}

	testenv.Must(t, w.startController())

	// From here to the end of the release, the controller is killed with
	// SIGKILL at random moments and started again (sigkill_test.go's killer).
	k := startKiller(w)

	// The controller follows each node as its own and reports it held.
	w.waitHeld(t, "theirs", 2)

	// At least one kill falls in the hold, whatever the machine's pace, and
	// the check below covers the controllers killed in it.
	k.waitKilled(ctx, t, 1)

	for _, m := range w.machines {
		c, err := w.rpcs(ctx, m.Name)
		testenv.Must(t, err)

		if c[applyRPC] != before[m.Name] {
			t.Errorf("%s received %d configuration(s) while held", m.Name, c[applyRPC]-before[m.Name])
		}
	}

	// Someone changes the worker behind the adoption's back: a document no
	// patch of the adoption carries. The release takes the control plane, and
	// the live check keeps the worker held, naming the path.
	hostDoc := filepath.Join(dir, "host.yaml")
	testenv.Must(t, os.WriteFile(hostDoc, []byte("apiVersion: v1alpha1\nkind: StaticHostConfig\nname: 10.5.0.9\nhostnames:\n  - registry.lan\n"), 0o600))
	mustTalosctl(ctx, t, tc, "--endpoints", wk.ip(), "--nodes", wk.ip(), "patch", "machineconfig", "--patch", "@"+hostDoc)

	out, err = w.ichor(ctx, "adopt", "--release", "--cluster", "theirs", "--timeout", "5m")
	if err == nil || !strings.Contains(out, "Release 1/2") || !strings.Contains(out, "StaticHostConfig/10.5.0.9:") ||
		!strings.Contains(out, "stays held") || strings.Index(out, "(controlplane, "+cp.ip()+")") > strings.Index(out, "(worker, "+wk.ip()+")") {
		t.Errorf("the release with a changed worker: %v\n%s", err, out)
	}

	// The change undone, the release continues with the worker.
	testenv.Must(t, os.WriteFile(hostDoc, []byte("apiVersion: v1alpha1\nkind: StaticHostConfig\nname: 10.5.0.9\n$patch: delete\n"), 0o600))
	mustTalosctl(ctx, t, tc, "--endpoints", wk.ip(), "--nodes", wk.ip(), "patch", "machineconfig", "--patch", "@"+hostDoc)

	out = w.mustIchor(t, ctx, "adopt", "--release", "--cluster", "theirs", "--timeout", "5m")
	if !strings.Contains(out, "Every machine of cluster theirs is released") || !strings.Contains(out, "Release 1/1") || !strings.Contains(out, "(worker, "+wk.ip()+")") {
		t.Errorf("the release after the change was undone:\n%s", out)
	}

	_, err = k.halt()
	testenv.Must(t, err)

	ms, err := w.heldMachines(ctx)
	testenv.Must(t, err)

	hashes := map[string]string{}

	for _, m := range ms {
		ready, reason := m.condition("Ready")
		if ready != "True" || m.Metadata.Annotations["ichor.maesh.dev/hold-apply"] != "" || m.Status.AppliedConfigHash == "" {
			t.Errorf("%s after the release: Ready %s (%s), annotations %v, applied %q", m.Metadata.Name, ready, reason, m.Metadata.Annotations, m.Status.AppliedConfigHash)
		}

		hashes[m.Metadata.Name] = m.Status.AppliedConfigHash
	}

	if out := w.mustIchor(t, ctx, "adopt", "--release", "--cluster", "theirs"); !strings.Contains(out, "nothing to release") {
		t.Errorf("a second release:\n%s", out)
	}

	// A config rollout works on the adopted cluster.
	w.mustIchor(t, ctx, "patch", "create", "tuning", "--cluster", "theirs", "--sysctl", "net.core.somaxconn=65535", "--yes")

	waitRolledOut(t, w, hashes)
}

// waitRolledOut waits until every machine is Ready with a render applied
// other than the one hashes names for it.
func waitRolledOut(t *testing.T, w *world, hashes map[string]string) {
	t.Helper()

	ctx := context.Background()

	testenv.EventuallyEvery(t, 5*time.Minute, 2*time.Second, fmt.Sprintf("the patch applied to the %d machines", len(hashes)), func() (bool, string) {
		ms, err := w.heldMachines(ctx)
		if err != nil {
			return false, err.Error()
		}

		var states []string

		ok := len(ms) == len(hashes)

		for _, m := range ms {
			ready, reason := m.condition("Ready")
			ok = ok && ready == "True" && m.Status.AppliedConfigHash != hashes[m.Metadata.Name]
			states = append(states, fmt.Sprintf("%s ready=%s(%s)", m.Metadata.Name, ready, reason))
		}

		return ok, strings.Join(states, "; ")
	})
}

// TestAdoptAddMachine: `ichor adopt --cluster NAME --add-machine ADDRESS`
// on a talosctl cluster of one control plane and two workers whose adoption
// left one worker out (it was not given with --node): once the adoption is
// released, the worker left out is read with the cluster's own credentials,
// registered held (no configuration reaches it while held), and released like
// an adopted machine; a machine Ichor knows already is refused; a patch then
// rolls out to the three.
func TestAdoptAddMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	w, err := startWorldIn(adoptAddSubnet, 3, 1, "")
	testenv.Must(t, err)
	t.Cleanup(w.stop)

	cp, wk, late := w.machines[0], w.machines[1], w.machines[2]
	tc, secretsFile := makeTalosctlCluster(ctx, t, "theirs", cp, wk, late)

	before, err := w.rpcs(ctx, late.Name)
	testenv.Must(t, err)

	w.mustIchor(t, ctx, "adopt", "--cni-unmanaged", "--install", "none", "--write-kubeconfig", w.kubeconfig, "--yes",
		"--talosconfig", tc, "--node", cp.ip(), "--node", wk.ip(), "--secrets-bundle", secretsFile)
	testenv.Must(t, w.startController())
	w.waitHeld(t, "theirs", 2)
	w.mustIchor(t, ctx, "adopt", "--release", "--cluster", "theirs", "--timeout", "5m")

	// The machine left out is registered with --add-machine, held, then
	// released; a machine Ichor knows already is refused.
	if out, err := w.ichor(ctx, "adopt", "--cluster", "theirs", "--add-machine", wk.ip(), "--yes"); err == nil || !strings.Contains(out, "is TalosMachine ichor-system/") {
		t.Errorf("--add-machine of a known machine: %v\n%s", err, out)
	}

	out := w.mustIchor(t, ctx, "adopt", "--cluster", "theirs", "--add-machine", late.ip(), "--yes")
	if !strings.Contains(out, "adoptable") || !strings.Contains(out, "ichor adopt --release --cluster theirs") {
		t.Errorf("--add-machine:\n%s", out)
	}

	testenv.EventuallyEvery(t, 5*time.Minute, 2*time.Second, "the added machine provisioned and held", func() (bool, string) {
		ms, err := w.heldMachines(ctx)
		if err != nil {
			return false, err.Error()
		}

		for _, m := range ms {
			if m.Spec.Address == late.ip() {
				prov, _ := m.condition("Provisioned")
				held, _ := m.condition("AdoptionHeld")

				return prov == "True" && held == "True", fmt.Sprintf("provisioned=%s held=%s", prov, held)
			}
		}

		return false, "no TalosMachine at " + late.ip()
	})

	if c, err := w.rpcs(ctx, late.Name); err != nil || c[applyRPC] != before[applyRPC] {
		t.Errorf("the added machine received a configuration while held: %v %v", c, err)
	}

	out = w.mustIchor(t, ctx, "adopt", "--release", "--cluster", "theirs", "--timeout", "5m")
	if !strings.Contains(out, "Release 1/1") || !strings.Contains(out, "(worker, "+late.ip()+")") {
		t.Errorf("the release of the added machine:\n%s", out)
	}

	ms, err := w.heldMachines(ctx)
	testenv.Must(t, err)

	hashes := map[string]string{}

	for _, m := range ms {
		if ready, _ := m.condition("Ready"); ready != "True" || m.Status.AppliedConfigHash == "" {
			t.Errorf("%s after the releases: Ready %s, applied %q", m.Metadata.Name, ready, m.Status.AppliedConfigHash)
		}

		hashes[m.Metadata.Name] = m.Status.AppliedConfigHash
	}

	if len(ms) != 3 {
		t.Fatalf("%d machines after --add-machine, want 3", len(ms))
	}

	// A config rollout reaches the added machine like the others.
	w.mustIchor(t, ctx, "patch", "create", "tuning", "--cluster", "theirs", "--sysctl", "net.core.somaxconn=65535", "--yes")
	waitRolledOut(t, w, hashes)
}

// mustTalosctl runs the real talosctl with talosconfig tc ("" for none:
// the gen commands take no talosconfig).
func mustTalosctl(ctx context.Context, t *testing.T, tc string, args ...string) {
	t.Helper()

	var (
		out string
		err error
	)

	if tc != "" {
		out, err = talosctl(ctx, t, tc, args...)
	} else {
		var b []byte
		b, err = exec.CommandContext(ctx, os.Getenv("TALOSCTL"), args...).CombinedOutput() //nolint:gosec // the test's own talosctl
		out = string(b)
	}

	if err != nil {
		t.Fatalf("talosctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestAdoptInstallsIchor: the write's default install (--install manifest)
// and a bundle rebuilt from a control plane (--recover-secrets, stored
// encrypted, mode 0600, holding talosctl's CAs):
// a talosctl cluster of one control plane and one worker, adopted with its
// CNI kept, gets Ichor from the installer Job (its pods run by the pod
// runner, admission webhooks on), and the in-cluster controller confirms
// both machines and reports them held; the release then hands both over and
// they are Ready.
func TestAdoptInstallsIchor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	w, err := startWorldIn(adoptInstallSubnet, 2, 1, adoptInstallPodRange)
	testenv.Must(t, err)
	t.Cleanup(w.stop)

	cp, wk := w.machines[0], w.machines[1]
	tc, secretsFile := makeTalosctlCluster(ctx, t, "installed", cp, wk)

	// The bundle is rebuilt from the control plane's configuration
	// (--recover-secrets), not read from the file talosctl wrote.
	out := w.mustIchor(t, ctx, "adopt", "--cni-unmanaged", "--talosconfig", tc, "--node", cp.ip(), "--node", wk.ip(),
		"--recover-secrets", "--write-kubeconfig", w.kubeconfig, "--yes")
	if !strings.Contains(out, "Ichor installed by the installer Job") || !strings.Contains(out, "Cluster installed is adopted and held") {
		t.Errorf("the write with the default install:\n%s", out)
	}

	// The store holds it, encrypted and private; it is the cluster's bundle.
	stored := filepath.Join(w.dir, "home", "clusters", "installed", "secrets.yaml.age")
	if st, err := os.Stat(stored); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the recovered bundle in the store: %v %v", st, err)
	}

	exported := filepath.Join(t.TempDir(), "bundle.yaml")
	w.mustIchor(t, ctx, "secrets", "export", "secrets.yaml", "--cluster", "installed", "--out", exported)

	if want, got := bundleCAs(t, secretsFile), bundleCAs(t, exported); want != got {
		t.Errorf("the stored bundle's CAs are not talosctl's: %q, want %q", got, want)
	}

	w.waitAvailable(t, ctx, "ichor-controller", 1, 5*time.Minute)

	w.waitHeld(t, "installed", 2)

	out = w.mustIchor(t, ctx, "adopt", "--release", "--cluster", "installed", "--timeout", "5m")
	if !strings.Contains(out, "Every machine of cluster installed is released") {
		t.Errorf("the release:\n%s", out)
	}

	ms, err := w.heldMachines(ctx)
	testenv.Must(t, err)

	for _, m := range ms {
		if ready, reason := m.condition("Ready"); ready != "True" || m.Status.AppliedConfigHash == "" {
			t.Errorf("%s after the release: Ready %s (%s), applied %q", m.Metadata.Name, ready, reason, m.Status.AppliedConfigHash)
		}
	}
}

// bundleCAs is the certificates of the Talos API and Kubernetes CAs of a
// secrets bundle file (public material: the test compares no key).
func bundleCAs(t *testing.T, file string) string {
	t.Helper()

	data, err := os.ReadFile(file)
	testenv.Must(t, err)

	var b struct {
		Certs struct {
			K8s, OS struct {
				Crt string `json:"crt"`
			}
		} `json:"certs"`
	}

	testenv.Must(t, yaml.Unmarshal(data, &b))

	if b.Certs.OS.Crt == "" || b.Certs.K8s.Crt == "" {
		t.Fatalf("%s has no CA certificates", file)
	}

	return b.Certs.OS.Crt + "/" + b.Certs.K8s.Crt
}
