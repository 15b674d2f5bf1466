package adoptflow

import (
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// TestHelmManaged: a Helm-managed Ichor of this CLI's version skips the
// install step; of another version it stops the adoption, naming helm
// upgrade; an Ichor the installer Job manages is installed as usual.
func TestHelmManaged(t *testing.T) {
	inst := func(manager, version string) *ichorv1alpha1.IchorInstallation {
		i := &ichorv1alpha1.IchorInstallation{}
		i.Spec.Deployment.Manager = manager
		i.Status.InstalledVersion = version

		return i
	}

	if skip, err := helmManaged(inst(ichorv1alpha1.ManagerHelm, "v0.5.0"), "v0.5.0+abc123"); !skip || err != nil {
		t.Errorf("same version: skip %t, %v", skip, err)
	}

	if skip, err := helmManaged(inst(ichorv1alpha1.ManagerIchor, "v0.4.0"), "v0.5.0"); skip || err != nil {
		t.Errorf("installer-managed: skip %t, %v", skip, err)
	}

	_, err := helmManaged(inst(ichorv1alpha1.ManagerHelm, "v0.4.0"), "v0.5.0")
	if err == nil || !strings.Contains(err.Error(), "helm upgrade") || !strings.Contains(err.Error(), "the Ichor in the cluster is v0.4.0") || !strings.Contains(err.Error(), "nothing was written") {
		t.Errorf("another version: %v", err)
	}
}
