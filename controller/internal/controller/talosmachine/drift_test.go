package talosmachine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// driftMachine is the machine the drift test changes behind Ichor's back.
const driftMachine = "w-2"

// changeBehindIchor patches the drift machine's running configuration
// directly with an admin client, as a person with talosctl would.
func changeBehindIchor(t *testing.T, patch string) {
	t.Helper()

	const name = driftMachine

	ctx := context.Background()
	n := adminNode(t, name)

	active, _, err := n.Config(ctx)
	testenv.Must(t, err)

	p, err := configpatcher.LoadPatch([]byte(patch))
	testenv.Must(t, err)

	out, err := configpatcher.Apply(configpatcher.WithBytes(active), []configpatcher.Patch{p})
	testenv.Must(t, err)

	b, err := out.Bytes()
	testenv.Must(t, err)

	_, err = n.Client().ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: b, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	testenv.Must(t, err)
}

func setDriftPolicy(t *testing.T, policy string) {
	t.Helper()

	ctx := context.Background()
	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, c))
	c.Spec.Drift.Policy = policy
	testenv.Must(t, k8s.Update(ctx, c))
}

// awaitDrift waits until the machine reports drift naming path.
func awaitDrift(t *testing.T, path string) *ichorv1alpha1.TalosMachine {
	t.Helper()

	const name = driftMachine

	var m *ichorv1alpha1.TalosMachine

	testenv.Eventually(t, waitTimeout, name+" reports drift at "+path, func() error {
		m = getMachine(t, name)
		c := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.DriftedCondition)

		if c == nil || c.Status != "True" {
			return fmt.Errorf("Drifted %+v", c)
		}

		if !strings.Contains(strings.Join(m.Status.DriftPaths, " "), path) || !strings.Contains(c.Message, path) {
			return fmt.Errorf("paths %v, message %q", m.Status.DriftPaths, c.Message)
		}

		if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ReadyCondition) {
			return errors.New("still Ready")
		}

		return nil
	})

	return m
}

// TestTalosMachineReconciler_Drift: a change made on the node behind Ichor's
// back is reported with its paths; under Warn it stays; under AutoCorrect a
// no-reboot difference is re-applied, a reboot-requiring one only reported.
func TestTalosMachineReconciler_Drift(t *testing.T) {
	const name = driftMachine

	rendered := inSync(t, name).Status.RenderedConfigHash

	t.Cleanup(func() { setDriftPolicy(t, "") })

	// Warn (the default): reported, left alone.
	changeBehindIchor(t, "apiVersion: v1alpha1\nkind: SysctlConfig\nparams:\n  net.ipv4.tcp_keepalive_time: \"600\"\n")

	path := sysctlPath("net.ipv4.tcp_keepalive_time")
	m := awaitDrift(t, path)

	if m.Status.AppliedConfigHash != rendered || m.Status.RenderedConfigHash != rendered {
		t.Errorf("drift changed the hashes: rendered %s applied %s, want %s", m.Status.RenderedConfigHash, m.Status.AppliedConfigHash, rendered)
	}

	awaitEvent(t, name, ichorv1alpha1.DriftDetectedReason, path)

	applies := applyCalls(t, name)
	pollsPass(t, name)

	if after := applyCalls(t, name); after != applies {
		t.Errorf("under Warn the node was sent a configuration: %d ApplyConfiguration calls, then %d", applies, after)
	}

	awaitNodeValue(t, name, path, "600")
	awaitDrift(t, path)

	// AutoCorrect: the no-reboot difference is re-applied.
	setDriftPolicy(t, ichorv1alpha1.DriftPolicyAutoCorrect)
	awaitNodeValue(t, name, path, nil)
	awaitEvent(t, name, ichorv1alpha1.DriftCorrectedReason, path)

	m = inSync(t, name)
	if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.DriftedCondition) || len(m.Status.DriftPaths) > 0 {
		t.Errorf("corrected drift still reported: %v", m.Status.DriftPaths)
	}

	// A reboot-requiring difference (machine.env of the legacy document) is
	// reported, never applied by the machine reconciler.
	changeBehindIchor(t, "machine:\n  env:\n    ICHOR_DRIFT: \"1\"\n")

	envPath := "machine.env.ICHOR_DRIFT"
	awaitDrift(t, envPath)

	applies = applyCalls(t, name)
	pollsPass(t, name)

	if after := applyCalls(t, name); after != applies {
		t.Errorf("a reboot-requiring drift was applied under AutoCorrect: %d ApplyConfiguration calls, then %d", applies, after)
	}

	awaitDrift(t, envPath)

	// Put the node back the way provisioning left it; the machine is in sync again.
	_, err := adminNode(t, name).Client().ApplyConfiguration(context.Background(),
		&machine.ApplyConfigurationRequest{Data: currentRender(t), Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	testenv.Must(t, err)

	if m := inSync(t, name); m.Status.RenderedConfigHash != rendered {
		t.Errorf("rendered hash %s, want %s", m.Status.RenderedConfigHash, rendered)
	}
}

// currentRender renders the drift machine from what the API holds now.
func currentRender(t *testing.T) []byte {
	const name = driftMachine

	t.Helper()

	ctx := context.Background()
	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, c))

	var patches ichorv1alpha1.TalosConfigPatchList
	testenv.Must(t, k8s.List(ctx, &patches, client.InNamespace(ns)))

	var storages ichorv1alpha1.TalosStorageList
	testenv.Must(t, k8s.List(ctx, &storages, client.InNamespace(ns)))

	res, err := render.Render(render.Input{Cluster: c, Machine: getMachine(t, name), Bundle: theBun, Patches: patches.Items, Storages: storages.Items})
	testenv.Must(t, err)

	return res.Bytes
}

// TestTalosMachineReconciler_RenderVersionChangeIsNotDrift: when the machine
// was last applied by another renderer (status.renderVersion differs from
// render.Version, as after an upgrade of Ichor), a difference on the node is
// a desired-state change: it is applied even under Warn, not reported as drift.
func TestTalosMachineReconciler_RenderVersionChangeIsNotDrift(t *testing.T) {
	const name = driftMachine

	inSync(t, name)

	changeBehindIchor(t, "apiVersion: v1alpha1\nkind: SysctlConfig\nparams:\n  net.ipv4.tcp_fin_timeout: \"20\"\n")

	path := sysctlPath("net.ipv4.tcp_fin_timeout")
	awaitDrift(t, path)

	// The last apply came from an older renderer.
	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := getMachine(t, name)
		m.Status.RenderVersion = render.Version - 1

		return k8s.Status().Update(context.Background(), m)
	}))

	// Under Warn, drift is never applied; this is, because it is the render's change.
	awaitNodeValue(t, name, path, nil)
	awaitEvent(t, name, ichorv1alpha1.AppliedReason, "")

	m := inSync(t, name)
	if m.Status.RenderVersion != render.Version {
		t.Errorf("renderVersion %d after the apply, want %d", m.Status.RenderVersion, render.Version)
	}

	if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.DriftedCondition) || len(m.Status.DriftPaths) > 0 {
		t.Errorf("the renderer's change is reported as drift: %v", m.Status.DriftPaths)
	}
}

// TestNodeConfigIsTheBytesTheNodeKeeps: talos.Node.Config hands back the
// configuration as the node keeps it, byte for byte (the render Ichor
// applied; after an apply of the same configuration with machinery's
// comments, as `talosctl gen config` writes it, those bytes), and the same
// configuration in other bytes is no drift.
func TestNodeConfigIsTheBytesTheNodeKeeps(t *testing.T) {
	const name = driftMachine

	ctx := context.Background()
	applied := inSync(t, name).Status.AppliedConfigHash
	n := adminNode(t, name)

	active, _, err := n.Config(ctx)
	testenv.Must(t, err)

	if got := render.Hash(active); got != applied {
		t.Fatalf("the node's configuration hashes to %s, Ichor applied %s", got, applied)
	}

	cfg, err := configloader.NewFromBytes(active)
	testenv.Must(t, err)

	commented, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsAll))
	testenv.Must(t, err)

	apply := func(b []byte) {
		_, err := n.Client().ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: b, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
		testenv.Must(t, err)
	}

	apply(commented)
	t.Cleanup(func() { apply(active) })

	got, _, err := n.Config(ctx)
	testenv.Must(t, err)

	if !bytes.Equal(got, commented) {
		t.Fatalf("Node.Config gave %d bytes, not the %d the node was sent (with comments)", len(got), len(commented))
	}

	pollsPass(t, name)

	m := getMachine(t, name)
	if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.DriftedCondition) || !apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ReadyCondition) {
		t.Fatalf("the same configuration in other bytes: %+v", m.Status.Conditions)
	}
}
