package commands

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/download"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/nodeop"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

const flagOperation = "operation"

// rotateCACommand is `ichor cluster rotate-ca`.
func rotateCACommand() *cli.Command {
	return &cli.Command{
		Name: "rotate-ca",
		Usage: "rotate the cluster's Talos API CA and Kubernetes CA in Talos's stages (accept the new CAs everywhere, hand this machine " +
			"credentials of them, issue with them, drop the old ones); writes the new talosconfig, kubeconfig and, at the end, the new bundle into " +
			"~/.ichor/clusters/NAME (needs the rotate-ca verb on talosoperations and download on talosclusters/credentials)",
		ArgsUsage: argCluster,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: flagDryRun, Usage: usageDryRun},
			&cli.BoolFlag{Name: "talos-only", Usage: "rotate the Talos API CA alone"},
			&cli.BoolFlag{Name: "kubernetes-only", Usage: "rotate the Kubernetes CA alone"},
			&cli.BoolFlag{Name: "aggregator", Usage: "rotate the Kubernetes aggregator CA (front proxy) too"},
			&cli.BoolFlag{Name: "aggregator-only", Usage: "rotate the Kubernetes aggregator CA alone (no credentials change hands)"},
			&cli.BoolFlag{Name: "etcd", Usage: "rotate the etcd CA too (this release refuses it: Talos cannot trust two etcd CAs at once)"},
			&cli.StringFlag{Name: flagOperation, Usage: "go on with the ca-rotation `OPERATION` already started (hand-over and the new bundle) instead of starting one"},
			&cli.StringFlag{Name: flagPassphraseFile, Usage: "read the secrets store's passphrase from `FILE` (else $" + secretstore.PassphraseEnv + ", else a prompt)", TakesFile: true},
			&cli.DurationFlag{Name: flagTimeout, Value: 2 * time.Hour, Usage: "how long to follow the rotation"},
		},
		Action: clusterRotateCA,
	}
}

// clusterRotateCA starts a ca-rotation (or picks one up), hands this
// machine credentials of the new CAs when the rotation waits for them, and
// follows it to its end, storing the new bundle.
func clusterRotateCA(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one CLUSTER"); err != nil {
		return err
	}

	if n := countTrue(cmd.Bool("talos-only"), cmd.Bool("kubernetes-only"), cmd.Bool("aggregator-only")); n > 1 {
		return errors.New("--talos-only, --kubernetes-only and --aggregator-only exclude each other (without any, the Talos API and Kubernetes CAs rotate); nothing was changed")
	}

	r, c, store, op, err := rotationTarget(ctx, cmd, ichorv1alpha1.OperationCARotation, func(r *run, c *ichorv1alpha1.TalosCluster, dryRun bool) (*ichorv1alpha1.TalosOperation, error) {
		return r.startRotation(ctx, cmd, c, dryRun)
	})
	if err != nil || op == nil {
		return err
	}

	wctx, cancel := context.WithTimeout(ctx, cmd.Duration(flagTimeout))
	defer cancel()

	awaiting := func(o *ichorv1alpha1.TalosOperation) bool {
		return o.Status.Phase == ichorv1alpha1.OperationAwaitingCredentials
	}

	if op.Annotations[ichorv1alpha1.CredentialsIssuedAnnotation] == "" {
		final, err := r.followOperation(wctx, op, false, awaiting)
		if err != nil {
			return err
		}

		if final == nil {
			return fmt.Errorf("stopped following operation %s before it asked for the credentials; it goes on: "+
				"`ichor cluster rotate-ca %s --operation %s` picks it up", op.Name, c.Name, op.Name)
		}

		if !awaiting(final) {
			// it ended without a hand-over (an aggregator CA rotation alone)
			if err := operationOutcome(final); err != nil {
				return err
			}

			return r.storeRotatedBundle(ctx, cmd, c, "rotate-ca", op.Name, store)
		}

		if err := r.handOver(ctx, cmd, c, final, store); err != nil {
			return err
		}
	}

	final, err := r.followOperation(wctx, op, false)
	if err != nil {
		return err
	}

	if final == nil {
		return fmt.Errorf("stopped following operation %s; it goes on, and the bundle in %s is the old one until "+
			"`ichor cluster rotate-ca %s --operation %s` stores the new one", op.Name, store.Dir, c.Name, op.Name)
	}

	if err := operationOutcome(final); err != nil {
		return err
	}

	return r.storeRotatedBundle(ctx, cmd, c, "rotate-ca", op.Name, store)
}

// startRotation builds the operation, checks it as the webhook does, asks
// for the cluster's name and creates it; nil with --dry-run.
func (r *run) startRotation(ctx context.Context, cmd *cli.Command, c *ichorv1alpha1.TalosCluster, dryRun bool) (*ichorv1alpha1.TalosOperation, error) {
	only := cmd.Bool("aggregator-only")
	op := nodeop.CARotation(c.Namespace, c.Name, !only && !cmd.Bool("kubernetes-only"), !only && !cmd.Bool("talos-only"),
		only || cmd.Bool("aggregator"), cmd.Bool("etcd"))

	facts, err := guard.LoadOperationFacts(ctx, r.c(), op)
	if err != nil {
		return nil, r.conn.Explain(err, "reading TalosCluster "+c.Name+" and its operations")
	}

	refusals := guard.ValidateOperation(op, facts)

	var b strings.Builder

	fmt.Fprintf(&b, "This rotates the CAs of cluster %s: a TalosOperation of type ca-rotation.\nSteps:\n", c.Name)

	for i, st := range nodeop.CARotationSteps(op) {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, st)
	}

	fmt.Fprintf(&b, "This command follows it to the end: it stores the new talosconfig and kubeconfig when the rotation asks for them, "+
		"and the new bundle once it has completed, in ~/.ichor/clusters/%s.\n", c.Name)

	writeRefusals(&b, refusals)
	text := strings.TrimSuffix(b.String(), "\n")

	if dryRun {
		r.printf("%s\n", text)

		if err := refusalError("rotating the CAs of cluster "+c.Name, refusals); err != nil {
			return nil, err
		}

		r.printf("The checks allow this now (the webhook also checks your verbs: `rotate-ca` on talosoperations). Nothing was changed (--dry-run).\n")

		return nil, nil
	}

	if err := refusalError("rotating the CAs of cluster "+c.Name, refusals); err != nil {
		return nil, err
	}

	// The rotation waits for this command's credentials: without the right
	// to take them it would wait for good (an aggregator CA rotation alone
	// hands none out).
	if !only {
		if err := r.checkDownload(ctx, c.Name, ichorv1alpha1.PurposeRotationCredentials); err != nil {
			return nil, err
		}
	}

	if err := r.confirm(text, c.Name); err != nil {
		return nil, err
	}

	if err := r.c().Create(ctx, op); err != nil {
		return nil, r.conn.Explain(err, "creating the ca-rotation operation of cluster "+c.Name)
	}

	r.printf("Started operation %s; following it until it asks for the credentials.\n", op.Name)

	return op, nil
}

// handOver asks the controller for credentials of the new CAs (a key made
// here; the controller signs it and records a Warning Event naming the
// requester) and stores the talosconfig and kubeconfig.
func (r *run) handOver(ctx context.Context, cmd *cli.Command, c *ichorv1alpha1.TalosCluster, op *ichorv1alpha1.TalosOperation, store *secretstore.Store) error {
	if err := r.checkDownload(ctx, c.Name, ichorv1alpha1.PurposeRotationCredentials); err != nil {
		return err
	}

	machines := &ichorv1alpha1.TalosMachineList{}
	if err := r.c().List(ctx, machines, client.InNamespace(c.Namespace)); err != nil {
		return r.conn.Explain(err, "listing TalosMachines in namespace "+c.Namespace)
	}

	endpoints := download.TalosconfigEndpoints(machines.Items, c.Name, 0)
	if len(endpoints) == 0 {
		return fmt.Errorf("cluster %s has no running control plane with an address for the talosconfig's endpoints; check `ichor machine list`", c.Name)
	}

	server, err := render.Endpoint(c.Spec.Endpoint)
	if err != nil {
		return err
	}

	key, err := download.NewTalosconfigKey()
	if err != nil {
		return err
	}

	tcr := download.RotationRequest(c.Namespace, c.Name, op.Name, key)
	if err := r.c().Create(ctx, tcr); err != nil {
		return r.conn.Explain(err, "creating the TalosCredentialRequest of the rotation's credentials")
	}

	signed, err := r.waitCredential(ctx, tcr)
	if err != nil {
		return err
	}

	talosconfig, err := key.Talosconfig(c.Name, endpoints, signed)
	if err != nil {
		return err
	}

	kubeconfig, err := key.Kubeconfig(c.Name, server, signed)
	if err != nil {
		return err
	}

	if err := r.saveToStore(cmd, store, secretstore.Contents{Talosconfig: talosconfig, Kubeconfig: kubeconfig}); err != nil {
		return fmt.Errorf("%w; the controller signed TalosCredentialRequest %s, and the rotation goes on: "+
			"run `ichor cluster rotate-ca %s --operation %s` again for new credentials", err, signed.Name, c.Name, op.Name)
	}

	r.printf("Stored an os:admin talosconfig and an admin kubeconfig of the new CAs in %s (valid until %s; they work with the old CAs too until those are dropped).\n",
		store.Dir, expiry(signed))

	return nil
}

func expiry(tcr *ichorv1alpha1.TalosCredentialRequest) string {
	if tcr.Status.ExpiresAt == nil {
		return "unknown"
	}

	return tcr.Status.ExpiresAt.UTC().Format(time.RFC3339)
}

// saveToStore writes contents into the cluster's store under its passphrase
// (a new store gets a new one).
func (r *run) saveToStore(cmd *cli.Command, store *secretstore.Store, contents secretstore.Contents) error {
	exists, err := store.Exists()
	if err != nil {
		return err
	}

	var pass string

	if exists {
		// The passphrase must open what is there (one passphrase per store).
		if _, err := store.Load(func() (string, error) {
			p, err := secretstore.PromptPassphrase(cmd.String(flagPassphraseFile), os.Stdin, r.errOut)()
			pass = p

			return p, err
		}); err != nil && !errors.Is(err, secretstore.ErrNotFound) {
			return err
		}
	}

	if pass == "" {
		p, generated, err := r.newPassphrase(cmd, true)
		if err != nil {
			return err
		}

		if generated {
			r.printf("The secrets store %s is encrypted with the passphrase %s; keep it safe, it is not shown again.\n", store.Dir, p)
		}

		pass = p
	}

	return store.Save(contents, pass)
}

// storeRotatedBundle copies the bundle Secret's bundle (the new CAs or
// keys) into the store: the local recovery copy must be the bundle the
// cluster runs.
// command is the `ichor cluster` subcommand that picks the operation up.
func (r *run) storeRotatedBundle(ctx context.Context, cmd *cli.Command, c *ichorv1alpha1.TalosCluster, command, operation string, store *secretstore.Store) error {
	sec := &corev1.Secret{}
	if err := r.c().Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Spec.SecretsBundleRef.Name}, sec); err != nil {
		if apierrors.IsForbidden(err) {
			// Ichor's roles grant no read of the bundle Secret.
			return fmt.Errorf("the rotation succeeded, but storing its bundle needs `get` on the Secret %s/%s, which Ichor's roles do not grant "+
				"(your local bundle is now the old one): someone who may read it runs `ichor cluster %s %s --operation %s` to store the new one",
				c.Namespace, c.Spec.SecretsBundleRef.Name, command, c.Name, operation)
		}

		return r.conn.Explain(err, "reading the secrets bundle Secret "+c.Spec.SecretsBundleRef.Name)
	}

	b, err := bundle.LoadForCluster(sec, c)
	if err != nil {
		return err
	}

	data, err := bundle.Encode(b)
	if err != nil {
		return err
	}

	if err := r.saveToStore(cmd, store, secretstore.Contents{Bundle: data}); err != nil {
		return fmt.Errorf("the rotation succeeded, but storing its bundle failed: %w; run `ichor cluster %s %s --operation %s` again to store it", err, command, c.Name, operation)
	}

	what := "CAs"
	if command == "rotate-keys" {
		what = "keys"
	}

	r.printf("The %s of cluster %s are rotated; the new bundle is stored in %s.\n", what, c.Name, store.Dir)

	return nil
}

// countTrue counts the flags that are set.
func countTrue(flags ...bool) int {
	n := 0

	for _, f := range flags {
		if f {
			n++
		}
	}

	return n
}

// rotationTarget is what `ichor cluster rotate-ca` and `rotate-keys` start
// from: the connection, the cluster, its secrets store and the operation of
// type typ, picked up by --operation or made by start (nil with --dry-run).
func rotationTarget(ctx context.Context, cmd *cli.Command, typ string,
	start func(r *run, c *ichorv1alpha1.TalosCluster, dryRun bool) (*ichorv1alpha1.TalosOperation, error),
) (*run, *ichorv1alpha1.TalosCluster, *secretstore.Store, *ichorv1alpha1.TalosOperation, error) {
	r, err := connected(cmd)
	if err != nil {
		return nil, nil, nil, nil, err
	}

	dryRun := cmd.Bool(flagDryRun)

	c, err := r.getCluster(ctx, cmd.Args().First())
	if err != nil {
		return nil, nil, nil, nil, err
	}

	store, err := secretstore.Open(c.Name, r.errOut)
	if err != nil {
		return nil, nil, nil, nil, err
	}

	name := cmd.String(flagOperation)
	if name == "" {
		op, err := start(r, c, dryRun)

		return r, c, store, op, err
	}

	op := &ichorv1alpha1.TalosOperation{}
	if err := r.c().Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, op); err != nil {
		return nil, nil, nil, nil, r.conn.Explain(err, "reading TalosOperation "+name)
	}

	if op.Spec.Type != typ || op.Spec.ClusterName != c.Name {
		return nil, nil, nil, nil, fmt.Errorf("TalosOperation %s is not a %s of cluster %s; `ichor operation list` shows the operations", name, typ, c.Name)
	}

	return r, c, store, op, nil
}
