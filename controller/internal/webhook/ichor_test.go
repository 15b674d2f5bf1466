package webhook

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// withInstallation creates the IchorInstallation (a singleton, so it is
// deleted when the test ends) managed by manager, with installed recorded.
func withInstallation(t *testing.T, manager, installed string) {
	t.Helper()
	ctx := context.Background()
	ii := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
		Spec: ichorv1alpha1.IchorInstallationSpec{
			Version:    ichorv1alpha1.IchorVersionSpec{Version: installed},
			Deployment: ichorv1alpha1.IchorDeploymentSpec{Manager: manager},
		},
	}
	testenv.Must(t, root.Create(ctx, ii))
	t.Cleanup(func() { _ = root.Delete(context.Background(), ii) })
	ii.Status.InstalledVersion = installed
	testenv.Must(t, root.Status().Update(ctx, ii))
}

func ichorUpgrade(version string, mutate ...func(*ichorv1alpha1.IchorUpgrade)) func(*ichorv1alpha1.TalosOperation) {
	return func(o *ichorv1alpha1.TalosOperation) {
		o.Spec.Ichor = &ichorv1alpha1.IchorUpgrade{Version: version}
		for _, f := range mutate {
			f(o.Spec.Ichor)
		}
	}
}

// Rule: an Ichor upgrade is admitted only for an Ichor the installer
// manages, to a release not older than the installed one and at most one
// minor up; each refusal says what to do instead.
func TestIchorOperationIsCheckedAgainstTheInstallation(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	testenv.Must(t, admin.Create(ctx, newCluster(ns, "c")))

	t.Run("no installation", func(t *testing.T) {
		refused(t, admin.Create(ctx, newOperation(ns, "none", ichorv1alpha1.OperationIchor, ichorUpgrade("v0.3.0"))),
			"Invalid", "spec.type", "no IchorInstallation", "`ichor init`")
	})

	t.Run("helm", func(t *testing.T) {
		withInstallation(t, ichorv1alpha1.ManagerHelm, "v0.2.0")
		refused(t, admin.Create(ctx, newOperation(ns, "helm", ichorv1alpha1.OperationIchor, ichorUpgrade("v0.3.0"))),
			"Invalid", "spec.type", "installed with Helm", "`helm upgrade`")
	})

	t.Run("ichor", func(t *testing.T) {
		withInstallation(t, ichorv1alpha1.ManagerIchor, "v0.2.0")
		refused(t, admin.Create(ctx, newOperation(ns, "down", ichorv1alpha1.OperationIchor, ichorUpgrade("v0.1.9"))),
			"Invalid", "spec.ichor.version", "v0.1.9 is older than the installed Ichor v0.2.0", "never downgrades", "choose v0.2.0 or a newer release")
		refused(t, admin.Create(ctx, newOperation(ns, "skip-minor", ichorv1alpha1.OperationIchor, ichorUpgrade("v0.4.0"))),
			"Invalid", "spec.ichor.version", "skips a minor release", "one minor at a time", "v0.3.x first")

		// The neighbours: the next minor is admitted, and so is an unsigned
		// build's skip, which leaves a Warning Event naming who asked.
		testenv.Must(t, admin.Create(ctx, newOperation(ns, "up", ichorv1alpha1.OperationIchor, ichorUpgrade("v0.3.0"))))
		testenv.Must(t, admin.Create(ctx, newOperation(ns, "unsigned", ichorv1alpha1.OperationIchor,
			ichorUpgrade("v0.3.0", func(u *ichorv1alpha1.IchorUpgrade) { u.InstallerSignature = "skip" }))))
		testenv.Eventually(t, 0, "the Warning Event of the skip", func() error {
			list := &eventsv1.EventList{}
			testenv.Must(t, root.List(ctx, list, client.InNamespace(ns)))
			for _, e := range list.Items {
				if e.Type == corev1.EventTypeWarning && e.Reason == ichorv1alpha1.SignatureCheckSkippedReason && e.Regarding.Name == "c" &&
					strings.Contains(e.Note, ns+"/unsigned: ada asked") && strings.Contains(e.Note, "without checking its signature") {
					return nil
				}
			}
			return fmt.Errorf("%d Events, none a %s by ada", len(list.Items), ichorv1alpha1.SignatureCheckSkippedReason)
		})
	})
}
