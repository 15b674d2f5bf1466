package talosmachine

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/retry"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// setHold sets (value non-empty) or lifts the hold-apply annotation of a machine.
func setHold(t *testing.T, name, value string) {
	t.Helper()

	testenv.Must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := getMachine(t, name)
		if value == "" {
			delete(m.Annotations, ichorv1alpha1.HoldApplyAnnotation)
		} else {
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}

			m.Annotations[ichorv1alpha1.HoldApplyAnnotation] = value
		}

		return k8s.Update(context.Background(), m)
	}))
}

// TestHeldMachineReportsAndNeverApplies: a machine held by the hold-apply
// annotation (adopted, or recovered after a full loss) shows AdoptionHeld; a
// change of its render is compared with the node and reported as drift with
// its path, InSync false (Held), and never applied, through several polls;
// lifting the hold applies it at once and drops AdoptionHeld.
func TestHeldMachineReportsAndNeverApplies(t *testing.T) {
	ctx := context.Background()

	const name = "w-2"

	inSync(t, name)
	setHold(t, name, "ichor-restore")
	t.Cleanup(func() { setHold(t, name, "") })

	testenv.Eventually(t, waitTimeout, name+" AdoptionHeld", func() error {
		c := apimeta.FindStatusCondition(getMachine(t, name).Status.Conditions, ichorv1alpha1.AdoptionHeldCondition)
		if c == nil || c.Status != "True" || c.Reason != ichorv1alpha1.HeldReason || !strings.Contains(c.Message, "ichor-restore") ||
			!strings.Contains(c.Message, "ichor restore --confirm") {
			return fmt.Errorf("AdoptionHeld %+v", c)
		}

		return nil
	})

	applies := applyCalls(t, name)
	key := "net.ipv4.tcp_fin_timeout"
	p := patchObj("held-sysctl", ichorv1alpha1.LayerMachine, ichorv1alpha1.PatchTarget{MachineName: name}, sysctl(key, "17"))
	testenv.Must(t, k8s.Create(ctx, p))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })

	path := sysctlPath(key)

	testenv.Eventually(t, waitTimeout, name+" reports the held change as drift", func() error {
		m := getMachine(t, name)
		c := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.InSyncCondition)

		if !strings.Contains(strings.Join(m.Status.DriftPaths, " "), path) || c == nil || c.Status != "False" || c.Reason != ichorv1alpha1.HeldReason {
			return fmt.Errorf("drift %v, InSync %+v", m.Status.DriftPaths, c)
		}

		return nil
	})

	awaitEvent(t, name, ichorv1alpha1.DriftDetectedReason, "held")
	pollsPass(t, name)

	if n := applyCalls(t, name); n != applies {
		t.Fatalf("the held machine was sent %d configuration(s)", n-applies)
	}

	awaitNodeValue(t, name, path, nil)

	setHold(t, name, "")
	awaitNodeValue(t, name, path, "17")

	m := inSync(t, name)
	if c := apimeta.FindStatusCondition(m.Status.Conditions, ichorv1alpha1.AdoptionHeldCondition); c != nil {
		t.Errorf("AdoptionHeld stays after the hold is lifted: %+v", c)
	}

	// Leave w-2 as the other tests expect it: without the patch, in sync.
	testenv.Must(t, k8s.Delete(ctx, p))
	awaitNodeValue(t, name, path, nil)
	inSync(t, name)
}
