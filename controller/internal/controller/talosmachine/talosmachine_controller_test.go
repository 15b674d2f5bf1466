package talosmachine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// inSync waits until the machine reports that its node runs the render.
func inSync(t *testing.T, name string) *ichorv1alpha1.TalosMachine {
	t.Helper()

	var m *ichorv1alpha1.TalosMachine

	testenv.Eventually(t, waitTimeout, name+" in sync", func() error {
		m = getMachine(t, name)
		if !apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ReadyCondition) {
			return fmt.Errorf("not ready: %+v", m.Status.Conditions)
		}

		if m.Status.RenderedConfigHash == "" || m.Status.AppliedConfigHash != m.Status.RenderedConfigHash {
			return fmt.Errorf("rendered %q, applied %q", m.Status.RenderedConfigHash, m.Status.AppliedConfigHash)
		}

		return nil
	})

	return m
}

func TestTalosMachineReconciler_ConfiguredMachinesInSync(t *testing.T) {
	for _, n := range machineNames {
		m := inSync(t, n)
		if m.Status.RenderVersion != render.Version {
			t.Errorf("%s: renderVersion %d, want %d", n, m.Status.RenderVersion, render.Version)
		}
		if m.Status.ObservedGeneration != m.Generation {
			t.Errorf("%s: observedGeneration %d, generation %d", n, m.Status.ObservedGeneration, m.Generation)
		}
	}
}

func patchObj(name, layer string, target ichorv1alpha1.PatchTarget, docs ...mirror.PatchDocument) *ichorv1alpha1.TalosConfigPatch {
	return &ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: ichorv1alpha1.TalosConfigPatchSpec{
			ClusterName: clusterName, Layer: layer, Target: target, Documents: docs,
		},
	}
}

func sysctl(key, value string) mirror.PatchDocument {
	return mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{key: value}}}
}

// nodeValues reads a node's active and persistent configurations, flattened by path.
func nodeValues(t *testing.T, name string) (active, persistent render.Values) {
	t.Helper()

	a, p, err := adminNode(t, name).Config(context.Background())
	testenv.Must(t, err)

	active, err = render.ConfigValues(a)
	testenv.Must(t, err)

	if p != nil {
		persistent, err = render.ConfigValues(p)
		testenv.Must(t, err)
	}

	return active, persistent
}

// valueAt finds the value of the path whose string form is path.
func valueAt(v render.Values, path string) (any, bool) {
	for p, x := range v {
		if p.String() == path {
			return x, true
		}
	}

	return nil, false
}

func sysctlPath(key string) string {
	return "SysctlConfig:params[" + strconv.Quote(key) + "]"
}

// eventNotes lists the notes of the Events about a machine with a reason.
func eventNotes(t *testing.T, machine, reason string) []string {
	t.Helper()

	var list eventsv1.EventList
	testenv.Must(t, k8s.List(context.Background(), &list, client.InNamespace(ns)))

	var out []string

	for _, e := range list.Items {
		if e.Regarding.Name == machine && e.Regarding.Kind == "TalosMachine" && e.Reason == reason {
			out = append(out, e.Note)
		}
	}

	return out
}

func awaitEvent(t *testing.T, machine, reason, contains string) {
	t.Helper()

	testenv.Eventually(t, waitTimeout, fmt.Sprintf("%s Event %s with %q", machine, reason, contains), func() error {
		notes := eventNotes(t, machine, reason)
		for _, n := range notes {
			if strings.Contains(n, contains) {
				return nil
			}
		}

		return fmt.Errorf("notes: %q", notes)
	})
}

// awaitNodeValue waits until the node's active configuration has want at path
// (want nil: the path is absent).
func awaitNodeValue(t *testing.T, name, path string, want any) {
	t.Helper()

	testenv.Eventually(t, waitTimeout, fmt.Sprintf("%s: %s = %v", name, path, want), func() error {
		active, _ := nodeValues(t, name)
		got, ok := valueAt(active, path)

		switch {
		case want == nil && ok:
			return fmt.Errorf("still has %v", got)
		case want != nil && (!ok || fmt.Sprint(got) != fmt.Sprint(want)):
			return fmt.Errorf("has %v (present %t); machine status %s", got, ok, conditionsOf(t, name))
		}

		return nil
	})
}

// TestTalosMachineReconciler_PatchLayers: a no-reboot patch at each layer
// reaches exactly the nodes it targets, applied NO_REBOOT after a dry run.
func TestTalosMachineReconciler_PatchLayers(t *testing.T) {
	ctx := context.Background()
	for _, n := range machineNames {
		inSync(t, n)
	}

	patches := []struct {
		p       *ichorv1alpha1.TalosConfigPatch
		key     string
		targets []string
	}{
		{patchObj("layer-cluster", ichorv1alpha1.LayerCluster, ichorv1alpha1.PatchTarget{}, sysctl("net.core.somaxconn", "4096")),
			"net.core.somaxconn", []string{"cp-1", "w-1", "w-2"}},
		{patchObj("layer-role", ichorv1alpha1.LayerRole, ichorv1alpha1.PatchTarget{Role: ichorv1alpha1.RoleWorker}, sysctl("vm.max_map_count", "262144")),
			"vm.max_map_count", []string{"w-1", "w-2"}},
		{patchObj("layer-selector", ichorv1alpha1.LayerSelector,
			ichorv1alpha1.PatchTarget{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "w-2"}}},
			sysctl("fs.inotify.max_user_watches", "524288")),
			"fs.inotify.max_user_watches", []string{"w-2"}},
		{patchObj("layer-machine", ichorv1alpha1.LayerMachine, ichorv1alpha1.PatchTarget{MachineName: "cp-1"}, sysctl("kernel.pid_max", "65536")),
			"kernel.pid_max", []string{"cp-1"}},
	}

	for _, p := range patches {
		testenv.Must(t, k8s.Create(ctx, p.p))
	}

	t.Cleanup(func() {
		for _, p := range patches {
			_ = k8s.Delete(ctx, p.p)
		}

		for _, n := range machineNames {
			awaitNodeValue(t, n, sysctlPath("net.core.somaxconn"), nil)
		}
	})

	for _, p := range patches {
		for _, n := range machineNames {
			want := any(nil)
			if slices.Contains(p.targets, n) {
				want = p.p.Spec.Documents[0].SysctlConfig.Params[p.key]
			}

			awaitNodeValue(t, n, sysctlPath(p.key), want)
		}
	}

	for _, n := range machineNames {
		m := inSync(t, n)
		if m.Status.DriftPaths != nil || apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.DriftedCondition) {
			t.Errorf("%s: a desired change reported as drift: %v", n, m.Status.DriftPaths)
		}

		awaitEvent(t, n, ichorv1alpha1.AppliedReason, "mode NO_REBOOT")
	}
}

// TestTalosMachineReconciler_InstallOnlyStaged: a change read only at install
// time (here the installer image, from the cluster) is applied STAGED: stored
// on the node, not running, and neither drift nor re-applied on every poll.
func TestTalosMachineReconciler_InstallOnlyStaged(t *testing.T) {
	ctx := context.Background()
	for _, n := range machineNames {
		inSync(t, n)
	}

	const image = "registry.example.com/talos/installer"

	stagedImage := image + ":" + testCluster().Spec.TalosVersion

	setInstaller := func(v string) {
		c := &ichorv1alpha1.TalosCluster{}
		testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, c))
		c.Spec.Registry.InstallerImage = v
		testenv.Must(t, k8s.Update(ctx, c))
	}

	setInstaller(image)

	for _, n := range machineNames {
		testenv.Eventually(t, waitTimeout, "the installer image staged on "+n, func() error {
			active, persistent := nodeValues(t, n)
			if p, ok := pathWithValue(persistent, stagedImage); !ok {
				p2, ok2 := pathWithValue(active, stagedImage)
				return fmt.Errorf("not in the persistent config (active: %s %t); %s", p2, ok2, conditionsOf(t, n))
			} else if p.String() != "UnattendedInstallConfig:installer.image" {
				return fmt.Errorf("found at %s", p)
			}

			if p, ok := pathWithValue(active, stagedImage); ok {
				return fmt.Errorf("the running config changed too: %s", p)
			}

			return nil
		})
		awaitEvent(t, n, ichorv1alpha1.StagedReason, "mode STAGED")

		// The Event goes out before the reconcile's status write lands.
		var m *ichorv1alpha1.TalosMachine

		testenv.Eventually(t, waitTimeout, n+" Ready with reason Staged", func() error {
			m = inSync(t, n)
			if c := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.ReadyCondition); c.Reason != ichorv1alpha1.StagedReason {
				return fmt.Errorf("Ready reason %q", c.Reason)
			}

			return nil
		})

		if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.DriftedCondition) {
			t.Errorf("%s: a staged change reported as drift: %v", n, m.Status.DriftPaths)
		}
	}

	before := applyCalls(t, "w-1")
	pollsPass(t, "w-1")

	if after := applyCalls(t, "w-1"); after != before {
		t.Errorf("a staged configuration was applied again: %d ApplyConfiguration calls, then %d", before, after)
	}

	setInstaller("")

	for _, n := range machineNames {
		testenv.Eventually(t, waitTimeout, "the staged change withdrawn on "+n, func() error {
			_, persistent := nodeValues(t, n)
			if p, ok := pathWithValue(persistent, stagedImage); ok {
				return fmt.Errorf("persistent config still has %s", p)
			}

			return nil
		})
		inSync(t, n)
	}
}

// pathWithValue finds a path holding the string value v.
func pathWithValue(vals render.Values, v string) (render.Path, bool) {
	for p, x := range vals {
		if s, ok := x.(string); ok && s == v {
			return p, true
		}
	}

	return render.Path{}, false
}

func applyCalls(t *testing.T, name string) int {
	t.Helper()

	em, err := world.Machine(name)
	testenv.Must(t, err)

	return em.RPCCounts()["/machine.MachineService/ApplyConfiguration"]
}

// cosiGetsPerPass is how many COSI Gets one configuration reconcile makes
// on a node it reaches: SystemInformation, HostnameStatus and Nodename for
// the identity, the active and the persistent MachineConfig.
const cosiGetsPerPass = 5

// pollsPass waits until the reconciler has looked at name's node four more
// times (the positive marker that drift polls ran; what they must not have
// done is asserted after it).
func pollsPass(t *testing.T, name string) {
	t.Helper()

	gets := func() int {
		em, err := world.Machine(name)
		testenv.Must(t, err)

		return em.RPCCounts()["/cosi.resource.State/Get"]
	}

	before := gets()

	testenv.Eventually(t, waitTimeout, "four drift polls of "+name, func() error {
		if n := gets() - before; n < 4*cosiGetsPerPass {
			return fmt.Errorf("%d COSI Gets since, want %d", n, 4*cosiGetsPerPass)
		}

		return nil
	})
}

// TestTalosMachineReconciler_APIServerRestartWaits: a change that restarts
// the kube-apiserver is never applied to a control plane by the machine
// reconciler: it waits with the paths.
func TestTalosMachineReconciler_APIServerRestartWaits(t *testing.T) {
	ctx := context.Background()
	inSync(t, "cp-1")

	p := patchObj("apiserver-env", ichorv1alpha1.LayerRole, ichorv1alpha1.PatchTarget{Role: ichorv1alpha1.RoleControlPlane},
		mirror.PatchDocument{KubeAPIServerConfig: &mirror.KubeAPIServerConfig{Env: map[string]string{"ICHOR_TEST": "1"}}})
	testenv.Must(t, k8s.Create(ctx, p))

	testenv.Eventually(t, waitTimeout, "cp-1 waits for a rollout", func() error {
		m := getMachine(t, "cp-1")
		c := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.APIServerRestartRequiredCondition)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition %+v", c)
		}

		if len(m.Status.RebootRequiredPaths) == 0 || !strings.Contains(strings.Join(m.Status.RebootRequiredPaths, " "), "ICHOR_TEST") {
			return fmt.Errorf("paths %v", m.Status.RebootRequiredPaths)
		}

		if !strings.Contains(c.Message, "ICHOR_TEST") {
			return fmt.Errorf("message %q names no path", c.Message)
		}

		if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ReadyCondition) {
			return errors.New("still Ready")
		}

		return nil
	})

	before := applyCalls(t, "cp-1")
	pollsPass(t, "cp-1")

	if after := applyCalls(t, "cp-1"); after != before {
		t.Errorf("the control plane was sent a configuration: %d ApplyConfiguration calls, then %d", before, after)
	}

	active, _ := nodeValues(t, "cp-1")
	for p := range active {
		if strings.Contains(p.String(), "ICHOR_TEST") {
			t.Fatalf("the node runs the waiting change: %s", p)
		}
	}

	awaitEvent(t, "cp-1", ichorv1alpha1.WaitingForRolloutReason, "ICHOR_TEST")

	testenv.Must(t, k8s.Delete(ctx, p))

	m := inSync(t, "cp-1")
	if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.APIServerRestartRequiredCondition) || len(m.Status.RebootRequiredPaths) > 0 {
		t.Errorf("the withdrawn change still waits: %v", m.Status.RebootRequiredPaths)
	}
}

func conditionsOf(t *testing.T, name string) string {
	m := getMachine(t, name)

	var b strings.Builder
	for _, c := range m.Status.Conditions {
		fmt.Fprintf(&b, "%s=%s/%s %q; ", c.Type, c.Status, c.Reason, c.Message)
	}

	return b.String()
}
