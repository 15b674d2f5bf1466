package commands

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/clusterreq"
	"github.com/maeshinshin/ichor/contracts/pkg/rollout"
)

// Flags of `ichor cluster authentication set`.
const (
	flagIchorUsers    = "ichor-users"
	flagIssuerURL     = "external-issuer-url"
	flagAudience      = "audience"
	flagUsernameClaim = "username-claim"
	flagGroupsClaim   = "groups-claim"
	flagExternalCA    = "external-ca-file"
	flagNoExternal    = "no-external"
)

// authenticationCommand is `ichor cluster authentication`: spec.authentication,
// as the console's Authentication card on the Settings page.
func authenticationCommand() *cli.Command {
	clusterFlag := &cli.StringFlag{Name: flagCluster, Usage: usageCluster}
	return &cli.Command{
		Name: "authentication",
		Usage: "whose ID tokens the cluster's kube-apiserver accepts (spec.authentication): ichor-ui's issuer for `ichor auth token`, " +
			"an external OIDC provider; changing it needs `update` on `talosclusters/authentication` (ichor-admin)",
		Action: unknownSubcommand,
		Commands: []*cli.Command{
			{
				Name:   cmdGet,
				Usage:  "print spec.authentication and the control planes still waiting for the kube-apiserver restart that applies it",
				Flags:  []cli.Flag{clusterFlag},
				Action: authenticationGet,
			},
			{
				Name: cmdSet,
				Usage: "change spec.authentication as you; the flags given change, the others keep their value. The control planes " +
					"then wait for a kube-apiserver restart: roll it out with `ichor config apply`",
				Flags: []cli.Flag{
					clusterFlag,
					&cli.BoolFlag{Name: flagIchorUsers, Usage: "accept the ID tokens of ichor-ui's issuer (users ichor:<name>); --ichor-users=false stops it"},
					&cli.StringFlag{Name: flagIssuerURL, Usage: "the external provider's issuer `URL` (https)"},
					&cli.StringSliceFlag{Name: flagAudience, Usage: "a client `ID` whose ID tokens are accepted (repeatable; replaces the list)"},
					&cli.StringFlag{Name: flagUsernameClaim, Usage: "the `CLAIM` naming the user (oidc:<claim>; empty: sub)"},
					&cli.StringFlag{Name: flagGroupsClaim, Usage: "the `CLAIM` listing the user's groups (oidc:<group>; empty: none)"},
					&cli.StringFlag{Name: flagExternalCA, TakesFile: true, Usage: "PEM `FILE` of the provider's CA (empty: the nodes' trusted roots)"},
					&cli.BoolFlag{Name: flagNoExternal, Usage: "trust no external provider any more"},
				},
				Action: authenticationSet,
			},
		},
	}
}

func authenticationGet(ctx context.Context, cmd *cli.Command) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	c, err := r.getCluster(ctx, cmd.String(flagCluster))
	if err != nil {
		return err
	}
	if r.format != output.Table {
		return output.Object(r.out, r.format, c.Spec.Authentication)
	}
	r.printAuthentication(ctx, c)
	return nil
}

func (r *run) printAuthentication(ctx context.Context, c *ichorv1alpha1.TalosCluster) {
	a := c.Spec.Authentication
	users := "no"
	if a.IchorUsers {
		users = "yes (`ichor auth token`, users ichor:<name>)"
	}
	r.printf("TalosCluster %s: the kube-apiserver accepts ID tokens of\n  Ichor's users:      %s\n", c.Name, users)
	if e := a.External; e != nil {
		ca := "the nodes' trusted roots"
		if e.CertificateAuthority != "" {
			ca = "a PEM bundle of its own"
		}
		r.printf("  external provider:  %s\n    audiences:        %s\n    username claim:   %s\n    groups claim:     %s\n    CA:               %s\n",
			e.IssuerURL, strings.Join(e.Audiences, ", "), orDefault(e.UsernameClaim, "sub"), orDefault(e.GroupsClaim, "none"), ca)
	} else {
		r.printf("  external provider:  none\n")
	}
	if pending := r.restartPending(ctx, c); len(pending) > 0 {
		r.printf("Waiting for a kube-apiserver restart: %s (roll it out with `ichor config apply --cluster %s`)\n", strings.Join(pending, ", "), c.Name)
	}
}

// restartPending are the cluster's machines whose kube-apiserver still runs
// an earlier configuration (APIServerRestartRequired).
func (r *run) restartPending(ctx context.Context, c *ichorv1alpha1.TalosCluster) []string {
	list := &ichorv1alpha1.TalosMachineList{}
	if err := r.c().List(ctx, list, client.InNamespace(c.Namespace)); err != nil {
		return nil
	}
	return rollout.APIServerRestartPending(c.Name, list.Items)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// authenticationChange applies set's flags to the current spec.
func authenticationChange(cmd *cli.Command, cur ichorv1alpha1.AuthenticationSpec) (ichorv1alpha1.AuthenticationSpec, error) {
	next := *cur.DeepCopy()
	if cmd.IsSet(flagIchorUsers) {
		next.IchorUsers = cmd.Bool(flagIchorUsers)
	}
	external := cmd.IsSet(flagIssuerURL) || cmd.IsSet(flagAudience) || cmd.IsSet(flagUsernameClaim) || cmd.IsSet(flagGroupsClaim) || cmd.IsSet(flagExternalCA)
	if cmd.Bool(flagNoExternal) {
		if external {
			return next, errors.New("--no-external takes the external provider away: give none of its flags with it")
		}
		next.External = nil
		return next, nil
	}
	if !external {
		if !cmd.IsSet(flagIchorUsers) {
			return next, errors.New("nothing to change: give --ichor-users, the external provider's flags (--external-issuer-url, --audience, ...) or --no-external")
		}
		return next, nil
	}
	e := &ichorv1alpha1.ExternalOIDC{}
	if next.External != nil {
		e = next.External
	}
	if cmd.IsSet(flagIssuerURL) {
		e.IssuerURL = cmd.String(flagIssuerURL)
	}
	if cmd.IsSet(flagAudience) {
		e.Audiences = cmd.StringSlice(flagAudience)
	}
	if cmd.IsSet(flagUsernameClaim) {
		e.UsernameClaim = cmd.String(flagUsernameClaim)
	}
	if cmd.IsSet(flagGroupsClaim) {
		e.GroupsClaim = cmd.String(flagGroupsClaim)
	}
	if cmd.IsSet(flagExternalCA) {
		e.CertificateAuthority = ""
		if f := cmd.String(flagExternalCA); f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return next, fmt.Errorf("--%s: %w", flagExternalCA, err)
			}
			e.CertificateAuthority = string(b)
		}
	}
	if e.IssuerURL == "" || len(e.Audiences) == 0 {
		return next, errors.New("an external provider needs --external-issuer-url and at least one --audience")
	}
	next.External = e
	return next, nil
}

func authenticationSet(ctx context.Context, cmd *cli.Command) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	c, err := r.getCluster(ctx, cmd.String(flagCluster))
	if err != nil {
		return err
	}
	next, err := authenticationChange(cmd, c.Spec.Authentication)
	if err != nil {
		return err
	}
	what := "changing the authentication of TalosCluster " + c.Name
	res, err := clusterreq.SetAuthentication(ctx, r.c(), client.ObjectKeyFromObject(c), next)
	var rf *clusterreq.Refused
	if errors.As(err, &rf) {
		return refusalError(what, rf.Refusals)
	}
	if err != nil {
		return fmt.Errorf("%w; nothing was written", r.conn.Explain(err, what))
	}
	if r.format != output.Table {
		return output.Object(r.out, r.format, res.Cluster.Spec.Authentication)
	}
	if !res.Changed {
		r.printf("The authentication of TalosCluster %s already was this; nothing was written.\n", c.Name)
		return nil
	}
	r.printf("The authentication of TalosCluster %s is written. Its control planes now wait for a kube-apiserver restart: "+
		"roll it out with `ichor config apply --cluster %s`.\n", c.Name, c.Name)
	return nil
}
