package commands

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
)

const (
	flagInstallerDigest    = "installer-digest"
	flagSkipSignatureCheck = "skip-signature-check"
	flagLocal              = "local"
)

// upgradeIchorCommand is `ichor upgrade ichor`.
func upgradeIchorCommand() *cli.Command {
	return &cli.Command{
		Name: ichorv1alpha1.OperationIchor,
		Usage: "upgrade Ichor itself (one minor at a time, never down) through the installer Job of VERSION, whose image is resolved to a digest " +
			"and whose signature by Ichor's release workflow is checked first; VERSION defaults to this ichor's release",
		ArgsUsage: argsVersion,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagCluster, Usage: usageCluster + " (its lock is held while the installer runs)"},
			&cli.StringFlag{Name: flagInstallerDigest, Usage: "run the installer image of this digest (sha256:...) instead of the one VERSION's tag names now"},
			&cli.BoolFlag{Name: flagSkipSignatureCheck, Usage: "run the installer image without checking its signature, for a build nobody signs; " +
				"recorded as a Warning Event (spec.ichor.installerSignature: skip)"},
			&cli.BoolFlag{Name: flagWait, Usage: usageWaitOperation},
			&cli.BoolFlag{Name: flagLocal, Usage: "run the installer here, with your credentials, instead of as a Job the controller starts: " +
				"the way out when the in-cluster upgrade cannot run (the controller is down); the same checks, the signature verified here, " +
				"the install manifest read from the installer image, the same snapshot and rollback; no operation is created, and the signature check is never skipped"},
		},
		Action: upgradeIchor,
	}
}

// upgradeIchor is `ichor upgrade ichor [VERSION] [--installer-digest D]
// [--skip-signature-check] [--wait]`: the shared checks against the
// IchorInstallation, a confirmation and a TalosOperation of type ichor,
// which the controller runs (architecture, "Upgrades").
func upgradeIchor(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() > 1 {
		return fmt.Errorf("`%s` takes at most one VERSION; run `%s --help`", cmd.FullName(), cmd.FullName())
	}
	target := cmd.Args().First()
	if target == "" {
		own := install.ReleaseVersion(version.Get().Version)
		if rel, err := version.Parse(own); err != nil || rel.Development() {
			return fmt.Errorf("`%s` needs a VERSION: this ichor is a development build (%s), not a release to upgrade to", cmd.FullName(), version.Get().Version)
		}
		target = own
	}
	if !strings.HasPrefix(target, "v") {
		target = "v" + target
	}
	digest := cmd.String(flagInstallerDigest)
	if len(guard.CheckInstallerDigest(digest)) > 0 {
		return fmt.Errorf("--%s %q is not sha256:<64 lowercase hex digits>: copy the digest the release notes give, or leave the flag out to use VERSION's tag; nothing was changed",
			flagInstallerDigest, digest)
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	c, err := r.getCluster(ctx, cmd.String(flagCluster))
	if err != nil {
		return err
	}
	ii, err := guard.LoadInstallation(ctx, r.c())
	if err != nil {
		return r.conn.Explain(err, "reading the IchorInstallation")
	}
	if err := refusalError("Upgrading Ichor to "+target, guard.CheckIchorUpgrade(ii, target)); err != nil {
		return err
	}
	up := &ichorv1alpha1.IchorUpgrade{Version: target, InstallerDigest: digest}
	if cmd.Bool(flagSkipSignatureCheck) {
		up.InstallerSignature = guard.SignatureSkip
		r.warnf("the installer image will run WITHOUT its signature checked (--%s); this is recorded as a Warning Event with your name", flagSkipSignatureCheck)
	}
	if cmd.Bool(flagLocal) {
		if cmd.Bool(flagWait) {
			return fmt.Errorf("--%s and --%s do not go together: --%s runs the installer here and returns when it ends; nothing was changed", flagLocal, flagWait, flagLocal)
		}
		// The only bypass of the signature check is the one an operation
		// records (spec.ichor.installerSignature: skip, a Warning Event);
		// a local run would leave no record.
		if up.InstallerSignature == guard.SignatureSkip {
			return fmt.Errorf("--%s never skips the signature check (a skip is recorded only on an operation): drop --%s, or run `%s` without --%s "+
				"so the skip is recorded; nothing was changed", flagLocal, flagSkipSignatureCheck, cmd.FullName(), flagLocal)
		}
		return r.upgradeIchorLocal(ctx, c, ii, up)
	}
	if err := r.confirm(upgradeIchorText(ii, up), c.Name); err != nil {
		return err
	}
	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, GenerateName: "ichor-" + strings.ReplaceAll(strings.ReplaceAll(target, ".", "-"), "+", "-") + "-"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: c.Name, Type: ichorv1alpha1.OperationIchor, Ichor: up},
	}
	return r.startOperation(ctx, cmd, op)
}

// upgradeIchorText is the confirmation of an Ichor upgrade.
func upgradeIchorText(ii *ichorv1alpha1.IchorInstallation, up *ichorv1alpha1.IchorUpgrade) string {
	from := ii.Status.InstalledVersion
	if from == "" {
		from = "(a version not recorded yet)"
	}
	repo := ii.Spec.Version.InstallerRepository
	if repo == "" {
		repo = install.InstallerRepository
	}
	image := fmt.Sprintf("%s:%s, resolved to its digest", repo, install.ImageTag(up.Version))
	if up.InstallerDigest != "" {
		image = repo + "@" + up.InstallerDigest
	}
	check := "after its signature by Ichor's release workflow is verified"
	if up.InstallerSignature == guard.SignatureSkip {
		check = "WITHOUT checking its signature"
	}
	return fmt.Sprintf("This upgrades Ichor from %s to %s: the controller runs the installer image %s %s, as a Job in Ichor's namespace. "+
		"The installer applies its RBAC, the CRDs (never downgraded), the controller and ichor-ui, checks them, and rolls back to %s if a step fails. "+
		"The controller and ichor-ui restart; the clusters' machines are not touched.", from, up.Version, image, check, from)
}
