package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/nodeop"
)

// rotateKeysCommand is `ichor cluster rotate-keys`.
func rotateKeysCommand() *cli.Command {
	return &cli.Command{
		Name: "rotate-keys",
		Usage: "rotate the cluster's service-account signing key and the secretbox key that encrypts its Secrets (accept the new keys, " +
			"sign and encrypt with them, write every Secret again, drop the old ones); stores the new bundle into ~/.ichor/clusters/NAME at the end " +
			"(needs the rotate-keys verb on talosoperations)",
		ArgsUsage: argCluster,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: flagDryRun, Usage: usageDryRun},
			&cli.BoolFlag{Name: "service-account-only", Usage: "rotate the service-account key alone"},
			&cli.BoolFlag{Name: "secretbox-only", Usage: "rotate the secretbox key alone"},
			&cli.StringFlag{Name: flagOperation, Usage: "follow the key-rotation `OPERATION` already started (and store its bundle) instead of starting one"},
			&cli.StringFlag{Name: flagPassphraseFile, Usage: "read the secrets store's passphrase from `FILE` (else $" + secretstore.PassphraseEnv + ", else a prompt)", TakesFile: true},
			&cli.DurationFlag{Name: flagTimeout, Value: 3 * time.Hour, Usage: "how long to follow the rotation (it waits an hour for the pods' tokens)"},
		},
		Action: clusterRotateKeys,
	}
}

// clusterRotateKeys starts a key-rotation (or picks one up) and follows it
// to its end, storing the new bundle: the local recovery copy must hold the
// keys the cluster encrypts with.
func clusterRotateKeys(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one CLUSTER"); err != nil {
		return err
	}

	if cmd.Bool("service-account-only") && cmd.Bool("secretbox-only") {
		return errors.New("--service-account-only and --secretbox-only exclude each other (without either, both keys rotate); nothing was changed")
	}

	r, c, store, op, err := rotationTarget(ctx, cmd, ichorv1alpha1.OperationKeyRotation, func(r *run, c *ichorv1alpha1.TalosCluster, dryRun bool) (*ichorv1alpha1.TalosOperation, error) {
		return r.startKeyRotation(ctx, cmd, c, dryRun)
	})
	if err != nil || op == nil {
		return err
	}

	wctx, cancel := context.WithTimeout(ctx, cmd.Duration(flagTimeout))
	defer cancel()

	final, err := r.followOperation(wctx, op, false)
	if err != nil {
		return err
	}

	if final == nil {
		return fmt.Errorf("stopped following operation %s; it goes on, and the bundle in %s is the old one until "+
			"`ichor cluster rotate-keys %s --operation %s` stores the new one", op.Name, store.Dir, c.Name, op.Name)
	}

	if err := operationOutcome(final); err != nil {
		return err
	}

	return r.storeRotatedBundle(ctx, cmd, c, "rotate-keys", op.Name, store)
}

// startKeyRotation builds the operation, checks it as the webhook does,
// asks for the cluster's name and creates it; nil with --dry-run.
func (r *run) startKeyRotation(ctx context.Context, cmd *cli.Command, c *ichorv1alpha1.TalosCluster, dryRun bool) (*ichorv1alpha1.TalosOperation, error) {
	op := nodeop.KeyRotation(c.Namespace, c.Name, !cmd.Bool("secretbox-only"), !cmd.Bool("service-account-only"))

	facts, err := guard.LoadOperationFacts(ctx, r.c(), op)
	if err != nil {
		return nil, r.conn.Explain(err, "reading TalosCluster "+c.Name+" and its operations")
	}

	refusals := guard.ValidateOperation(op, facts)

	var b strings.Builder

	fmt.Fprintf(&b, "This rotates the keys of cluster %s: a TalosOperation of type key-rotation.\nSteps:\n", c.Name)

	for i, st := range nodeop.KeyRotationSteps() {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, st)
	}

	fmt.Fprintf(&b, "This command follows it to the end and stores the new bundle in ~/.ichor/clusters/%s.\n", c.Name)

	writeRefusals(&b, refusals)
	text := strings.TrimSuffix(b.String(), "\n")

	if dryRun {
		r.printf("%s\n", text)

		if err := refusalError("rotating the keys of cluster "+c.Name, refusals); err != nil {
			return nil, err
		}

		r.printf("The checks allow this now (the webhook also checks your verbs: `rotate-keys` on talosoperations). Nothing was changed (--dry-run).\n")

		return nil, nil
	}

	if err := refusalError("rotating the keys of cluster "+c.Name, refusals); err != nil {
		return nil, err
	}

	if err := r.confirm(text, c.Name); err != nil {
		return nil, err
	}

	if err := r.c().Create(ctx, op); err != nil {
		return nil, r.conn.Explain(err, "creating the key-rotation operation of cluster "+c.Name)
	}

	r.printf("Started operation %s; following it to the end.\n", op.Name)

	return op, nil
}
