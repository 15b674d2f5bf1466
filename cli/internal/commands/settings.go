package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/settings"
)

// Flags of `ichor settings set`.
const (
	flagIDTokenLifetime      = "id-token-lifetime"
	flagRefreshTokenLifetime = "refresh-token-lifetime"
	flagDefaultDriftPolicy   = "default-drift-policy"
	flagClear                = "clear"
)

// settingsCommand is `ichor settings`, the console's Settings page.
func settingsCommand() *cli.Command {
	return &cli.Command{
		Name: "settings",
		Usage: "Ichor's runtime settings (the IchorInstallation's spec.settings), read live by the controller, " +
			"the webhooks and ichor-ui: sign-in lifetimes and the default drift policy",
		Action: unknownSubcommand,
		Commands: []*cli.Command{
			{
				Name:   cmdGet,
				Usage:  "show the settings, with the defaults in force where none is set",
				Action: settingsGet,
			},
			{
				Name: cmdSet,
				Usage: "change settings (needs update on ichorinstallations/settings, ichor-admin); " +
					"the next sign-in and the next drift found use them, with no restart",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: flagIDTokenLifetime, Usage: fmt.Sprintf("the lifetime of ichor-ui's ID and access tokens, %s to %s (`DURATION`)",
						settings.Short(settings.MinIDTokenLifetime), settings.Short(settings.MaxIDTokenLifetime))},
					&cli.StringFlag{Name: flagRefreshTokenLifetime, Usage: fmt.Sprintf("the lifetime of a sign-in and its refresh tokens, %s to %s (`DURATION`)",
						settings.Short(settings.MinRefreshTokenLifetime), settings.Short(settings.MaxRefreshTokenLifetime))},
					&cli.StringFlag{Name: flagDefaultDriftPolicy, Usage: "the drift policy of clusters that set none: Warn or AutoCorrect (`POLICY`)"},
					&cli.StringSliceFlag{Name: flagClear, Usage: "reset a setting to its default: id-token-lifetime, refresh-token-lifetime or default-drift-policy (`NAME`, repeatable)"},
				},
				Action: settingsSet,
			},
		},
	}
}

// settingsView is what `ichor settings get -o yaml|json` prints.
type settingsView struct {
	Settings         ichorv1alpha1.IchorSettings `json:"settings"`
	Effective        effectiveView               `json:"effective"`
	InstalledVersion string                      `json:"installedVersion,omitempty"`
	ResourceVersion  string                      `json:"resourceVersion"`
}

type effectiveView struct {
	IDTokenLifetime      string `json:"idTokenLifetime"`
	RefreshTokenLifetime string `json:"refreshTokenLifetime"`
	DefaultDriftPolicy   string `json:"defaultDriftPolicy"`
}

func (r *run) installation(ctx context.Context) (*ichorv1alpha1.IchorInstallation, error) {
	inst := &ichorv1alpha1.IchorInstallation{}
	if err := r.c().Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, inst); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("there is no IchorInstallation %q: Ichor is not installed in this cluster (`ichor init` installs it)", ichorv1alpha1.IchorInstallationName)
		}

		return nil, r.conn.Explain(err, "reading IchorInstallation "+ichorv1alpha1.IchorInstallationName)
	}

	return inst, nil
}

func (r *run) printSettings(inst *ichorv1alpha1.IchorInstallation) error {
	eff := settings.Of(&inst.Spec.Settings)
	if r.format != output.Table {
		return output.Object(r.out, r.format, settingsView{
			Settings: inst.Spec.Settings, InstalledVersion: inst.Status.InstalledVersion, ResourceVersion: inst.ResourceVersion,
			Effective: effectiveView{
				IDTokenLifetime: settings.Short(eff.IDTokenLifetime), RefreshTokenLifetime: settings.Short(eff.RefreshTokenLifetime),
				DefaultDriftPolicy: eff.DefaultDriftPolicy,
			},
		})
	}

	st := &inst.Spec.Settings
	mark := func(value string, set bool) string {
		if set {
			return value
		}

		return value + " (default)"
	}
	t := &output.Rows{Header: []string{"SETTING", "VALUE"}}
	t.Add(flagIDTokenLifetime, mark(settings.Short(eff.IDTokenLifetime), st.IDTokenLifetime != nil))
	t.Add(flagRefreshTokenLifetime, mark(settings.Short(eff.RefreshTokenLifetime), st.RefreshTokenLifetime != nil))
	t.Add(flagDefaultDriftPolicy, mark(eff.DefaultDriftPolicy, st.DefaultDriftPolicy != ""))
	t.Add("installed-version", inst.Status.InstalledVersion)

	return t.Write(r.out)
}

func settingsGet(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() > 0 {
		return fmt.Errorf("`%s` takes no arguments; run `%s --help`", cmd.FullName(), cmd.FullName())
	}

	r, err := connected(cmd)
	if err != nil {
		return err
	}

	inst, err := r.installation(ctx)
	if err != nil {
		return err
	}

	return r.printSettings(inst)
}

// settingsSet checks the whole change first (the same settings.Change the
// console's UpdateSettings checks), then the permission as the kubeconfig's
// user, then writes it; bad input changes nothing.
func settingsSet(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Len() > 0 {
		return fmt.Errorf("`%s` takes flags, not arguments (for example --%s 10m); run `%s --help`", cmd.FullName(), flagIDTokenLifetime, cmd.FullName())
	}

	var reset []string
	for _, c := range cmd.StringSlice(flagClear) {
		reset = append(reset, strings.ReplaceAll(c, "-", "_"))
	}

	change, err := settings.Change{
		IDTokenLifetime: cmd.String(flagIDTokenLifetime), RefreshTokenLifetime: cmd.String(flagRefreshTokenLifetime),
		DefaultDriftPolicy: cmd.String(flagDefaultDriftPolicy), Clear: reset,
	}.Check()
	if err != nil {
		return fmt.Errorf("%w (the flags are --%s, --%s, --%s and --%s)", err, flagIDTokenLifetime, flagRefreshTokenLifetime, flagDefaultDriftPolicy, flagClear)
	}

	r, err := connected(cmd)
	if err != nil {
		return err
	}

	var out *ichorv1alpha1.IchorInstallation

	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		inst, err := r.installation(ctx)
		if err != nil {
			return err
		}

		next := inst.DeepCopy()
		change(&next.Spec.Settings)

		if settings.Equal(&next.Spec.Settings, &inst.Spec.Settings) {
			out = inst

			return nil
		}

		if err := r.checkRequirements(ctx, guard.InstallationRequirements(inst, next), "change Ichor's settings", "the settings were not changed"); err != nil {
			return err
		}

		if err := r.c().Update(ctx, next); err != nil {
			return err
		}

		out = next

		return nil
	})
	if err != nil {
		var se apierrors.APIStatus
		if errors.As(err, &se) {
			return fmt.Errorf("%w; the settings were not changed", r.conn.Explain(err, "writing IchorInstallation "+ichorv1alpha1.IchorInstallationName))
		}

		return err
	}

	return r.printSettings(out)
}
