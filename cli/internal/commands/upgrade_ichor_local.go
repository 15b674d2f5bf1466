package commands

import (
	"context"
	"errors"
	"fmt"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/installer"
	"github.com/maeshinshin/ichor/contracts/pkg/installerimage"
)

// upgradeIchorLocal is `ichor upgrade ichor VERSION --local`: what the
// ichor operation's steps do, done by the CLI with the user's credentials
// (architecture, "Upgrades", the Ichor paragraph: the way out of a broken
// in-cluster upgrade). The installer image is resolved to a digest and its
// signature verified here, exactly as the controller does (the same
// installerimage functions); the install manifest is read from that image
// (installerimage.ManifestPath); the installer library runs in process with
// its CRD check, snapshot, rollback and post-checks, and writes the
// IchorInstallation's status. No TalosOperation is created and the
// cluster lock is not taken: the controller, which keeps both, may be the
// thing that is broken.
func (r *run) upgradeIchorLocal(ctx context.Context, c *ichorv1alpha1.TalosCluster, ii *ichorv1alpha1.IchorInstallation, up *ichorv1alpha1.IchorUpgrade) error {
	reg := installerimage.Registry{}

	img, err := installerimage.Resolve(ctx, ii.Spec.Version.InstallerRepository, up.Version, up.InstallerDigest, reg)
	if err != nil {
		return fmt.Errorf("%w; nothing was changed", err)
	}

	ref := img.Reference()
	r.printf("Installer image: %s\n", ref)

	// upgradeIchor refuses --local with --skip-signature-check: the check always runs here.
	sig, err := installerimage.Verify(ctx, ref, installerimage.ReleasePolicy(), reg)
	if err != nil {
		var refusal *installerimage.Refusal
		if errors.As(err, &refusal) {
			return fmt.Errorf("%w; nothing was changed", err)
		}

		return fmt.Errorf("verifying the signature of %s: %w; nothing was changed", ref, err)
	}

	r.printf("Signature: verified, signed by %s (issuer %s)\n", sig.Subject, sig.Issuer)

	manifest, err := installerimage.Manifest(ctx, ref, reg)
	if err != nil {
		return fmt.Errorf("%w; nothing was changed", err)
	}

	from := ii.Status.InstalledVersion
	if from == "" {
		from = "(a version not recorded yet)"
	}

	if err := r.confirm(fmt.Sprintf("This upgrades Ichor from %s to %s HERE, with your credentials: the installer of %s applies its RBAC, the CRDs "+
		"(never downgraded), the controller and ichor-ui, checks them, and rolls back to %s if a step fails. No operation is created and the "+
		"cluster lock is not taken. The clusters' machines are not touched.", from, up.Version, ref, from), c.Name); err != nil {
		return err
	}

	if err := installer.Run(ctx, installer.Options{
		Config: r.conn.Config, Manifest: manifest, ManifestSource: ref, Version: up.Version, Log: r.out,
	}); err != nil {
		return fmt.Errorf("the local upgrade to %s did not complete: %w", up.Version, err)
	}

	r.printf("Ichor %s is installed.\n", up.Version)

	return nil
}
