package talosmachine

import (
	"context"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// setDefaultDriftPolicy writes the IchorInstallation's
// spec.settings.defaultDriftPolicy (creating the installation if needed),
// as `ichor settings set default-drift-policy` does.
func setDefaultDriftPolicy(t *testing.T, policy string) {
	t.Helper()

	ctx := context.Background()

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		inst := &ichorv1alpha1.IchorInstallation{}

		err := k8s.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, inst)
		if apierrors.IsNotFound(err) {
			inst = &ichorv1alpha1.IchorInstallation{
				ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
				Spec:       ichorv1alpha1.IchorInstallationSpec{Version: ichorv1alpha1.IchorVersionSpec{Version: "v0.4.0"}},
			}
			inst.Spec.Settings.DefaultDriftPolicy = policy

			return k8s.Create(ctx, inst)
		}

		if err != nil {
			return err
		}

		inst.Spec.Settings.DefaultDriftPolicy = policy

		return k8s.Update(ctx, inst)
	}))
}

// TestDefaultDriftPolicyIsReadLive: a cluster that sets no drift policy
// follows the installation's default, read when the drift is found: with
// the default Warn a change behind Ichor's back stays; setting the default
// to AutoCorrect corrects it at once, with no restart and no change to the
// cluster or the machine (the IchorInstallation's change reaches every
// machine); a cluster's own Warn still wins over the default.
func TestDefaultDriftPolicyIsReadLive(t *testing.T) {
	const name = driftMachine

	rendered := inSync(t, name).Status.RenderedConfigHash

	t.Cleanup(func() {
		setDefaultDriftPolicy(t, "")
		setDriftPolicy(t, "")
		_, err := adminNode(t, name).Client().ApplyConfiguration(context.Background(),
			&machine.ApplyConfigurationRequest{Data: currentRender(t), Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
		testenv.Must(t, err)
		inSync(t, name)
	})

	// No default written: Warn.
	changeBehindIchor(t, "apiVersion: v1alpha1\nkind: SysctlConfig\nparams:\n  net.ipv4.tcp_keepalive_probes: \"7\"\n")

	path := sysctlPath("net.ipv4.tcp_keepalive_probes")
	awaitDrift(t, path)

	applies := applyCalls(t, name)
	pollsPass(t, name)

	if after := applyCalls(t, name); after != applies {
		t.Fatalf("with no default the node was sent a configuration: %d ApplyConfiguration calls, then %d", applies, after)
	}

	// The default becomes AutoCorrect: the same running controller corrects it.
	setDefaultDriftPolicy(t, ichorv1alpha1.DriftPolicyAutoCorrect)
	awaitNodeValue(t, name, path, nil)
	awaitEvent(t, name, ichorv1alpha1.DriftCorrectedReason, path)

	if m := inSync(t, name); m.Status.RenderedConfigHash != rendered {
		t.Errorf("rendered hash %s, want %s", m.Status.RenderedConfigHash, rendered)
	}

	// The cluster's own Warn wins over the default.
	setDriftPolicy(t, ichorv1alpha1.DriftPolicyWarn)
	changeBehindIchor(t, "apiVersion: v1alpha1\nkind: SysctlConfig\nparams:\n  net.ipv4.tcp_keepalive_probes: \"8\"\n")
	awaitDrift(t, path)

	applies = applyCalls(t, name)
	pollsPass(t, name)

	if after := applyCalls(t, name); after != applies {
		t.Fatalf("the cluster's Warn was overridden by the default AutoCorrect: %d ApplyConfiguration calls, then %d", applies, after)
	}

	awaitNodeValue(t, name, path, "8")
}
