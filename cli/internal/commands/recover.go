package commands

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/maeshinshin/ichor/cli/internal/initflow"
	"github.com/maeshinshin/ichor/cli/internal/kube"
	"github.com/maeshinshin/ichor/cli/internal/output"
	"github.com/maeshinshin/ichor/cli/internal/recoverflow"
	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/store"
	"github.com/maeshinshin/ichor/contracts/pkg/recovery"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
)

// Flags of `ichor restore`.
const (
	flagRecoverCluster = "recover-cluster"
	flagConfirmCluster = "confirm"
	flagFromStore      = "from-store"
	// The environment variables the store's credentials come from (the
	// command line is readable by every local user).
	envS3AccessKey = "ICHOR_S3_ACCESS_KEY_ID"
	envS3SecretKey = "ICHOR_S3_SECRET_ACCESS_KEY" //nolint:gosec // the name of a variable, not a credential
	envAWSAccess   = "AWS_ACCESS_KEY_ID"
	envAWSSecret   = "AWS_SECRET_ACCESS_KEY" //nolint:gosec // the name of a variable, not a credential
	// flagPassphraseFile reads the secrets store's passphrase from a file.
	flagPassphraseFile = "passphrase-file"
	// flagGeneratePassphrase generates a new store's passphrase and shows it once.
	flagGeneratePassphrase = "generate-passphrase"
	// flagInstall, flagInstallerImage and flagWriteKubeconfig: how init,
	// the recovery and adopt install Ichor, and where they also write the
	// admin kubeconfig.
	flagInstall         = "install"
	flagInstallerImage  = "installer-image"
	flagWriteKubeconfig = "write-kubeconfig"
)

func restoreCommand() *cli.Command {
	return &cli.Command{
		Name: "restore",
		Usage: "recover a cluster whose every machine was wiped, from the local secrets bundle and a snapshot in the backup store " +
			"(--recover-cluster), then lift the holds it leaves once the machines look right (--confirm); " +
			"a cluster that still runs is restored with `ichor etcd restore`",
		Description: "--recover-cluster CLUSTER reads ~/.ichor/clusters/CLUSTER/ (the bundle `ichor init` stored), downloads the snapshot from " +
			"--from-store, decrypts it with --identity and checks it, reads the cluster's TalosCluster and TalosMachines out of it, and " +
			"checks that every control plane answers in maintenance mode at the address the snapshot records, with its recorded SMBIOS UUID. " +
			"After the cluster's name is typed it sends each control plane its configuration, uploads the snapshot to one and bootstraps etcd " +
			"from it, waits for the others to join and for the Kubernetes API, installs Ichor (--install) and holds every TalosMachine " +
			"(ichor.maesh.dev/hold-apply=" + recoverflow.HoldValue + "): the controller reports drift and applies nothing. " +
			"The store's credentials come from $" + envS3AccessKey + " and $" + envS3SecretKey + " (or $" + envAWSAccess + " and $" + envAWSSecret + "). " +
			"--confirm CLUSTER lists the held machines with their drift and, once the cluster's name is typed, lifts those holds.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagRecoverCluster, Usage: "recover cluster `NAME` after a full loss"},
			&cli.StringFlag{Name: flagConfirmCluster, Usage: "lift the holds the recovery of cluster `NAME` left"},
			&cli.StringFlag{Name: flagSnapshot, Value: recoverflow.SnapshotLatest, Usage: "the snapshot `NAME`, as ichor etcd backup list showed it (or its key); latest is the newest the store lists"},
			&cli.StringFlag{Name: flagFromStore, Usage: "the backup store: `URL` http(s)://HOST[:PORT]/BUCKET[/PREFIX], the TalosEtcdBackup's spec.s3 endpoint, bucket and prefix"},
			&cli.StringFlag{Name: "region", Usage: "the store's S3 `REGION` (spec.s3.region)"},
			&cli.StringFlag{Name: flagIdentity, Usage: "a `FILE` holding an age identity (AGE-SECRET-KEY-1…) of one of the backup's recipients", TakesFile: true},
			&cli.StringFlag{Name: flagInstall, Value: initflow.InstallManifest, Usage: "`MODE`: manifest (the installer Job installs Ichor, as `ichor init` does) or none (only its CRDs; the controller runs elsewhere)"},
			&cli.StringFlag{Name: flagInstallerImage, Usage: "the installer Job's `IMAGE` (default: this release's)"},
			&cli.IntFlag{Name: flagTalosPort, Usage: usageTalosPort},
			&cli.StringFlag{Name: flagWriteKubeconfig, Usage: "also write the recovered cluster's admin kubeconfig to `FILE` (mode 0600)", TakesFile: true},
			&cli.StringFlag{Name: flagPassphraseFile, Usage: "read the secrets store's passphrase from `FILE` (else $" + secretstore.PassphraseEnv + ", else a prompt)", TakesFile: true},
			&cli.BoolFlag{Name: flagDryRun, Usage: "check everything and print the plan (or the held machines), and change nothing"},
			&cli.DurationFlag{Name: flagTimeout, Value: 15 * time.Minute, Usage: "how long each wait lasts"},
		},
		Action: restoreAction,
	}
}

func restoreAction(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Present() {
		return fmt.Errorf("`%s` takes no argument: name the cluster with --%s or --%s", cmd.FullName(), flagRecoverCluster, flagConfirmCluster)
	}

	recoverName, confirmName := cmd.String(flagRecoverCluster), cmd.String(flagConfirmCluster)

	switch {
	case recoverName != "" && confirmName != "":
		return fmt.Errorf("give either --%s (rebuild the cluster) or --%s (lift the holds afterwards), not both", flagRecoverCluster, flagConfirmCluster)
	case confirmName != "":
		return restoreConfirm(ctx, cmd, confirmName)
	case recoverName != "":
		return recoverCluster(ctx, cmd, recoverName)
	default:
		return fmt.Errorf("`%s` needs --%s CLUSTER (after a full loss) or --%s CLUSTER (afterwards); a cluster that still runs is restored with `ichor etcd restore`",
			cmd.FullName(), flagRecoverCluster, flagConfirmCluster)
	}
}

// parseStore reads --from-store http(s)://HOST[:PORT]/BUCKET[/PREFIX] and the
// credentials from the environment.
func parseStore(v, region string) (store.Destination, error) {
	if v == "" {
		return store.Destination{}, fmt.Errorf("--%s is missing: give the backup store as http(s)://HOST[:PORT]/BUCKET[/PREFIX] "+
			"(the TalosEtcdBackup's spec.s3 endpoint, bucket and prefix)", flagFromStore)
	}

	u, err := url.Parse(v)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return store.Destination{}, fmt.Errorf("--%s %q is not a URL such as https://s3.example.com/BUCKET/PREFIX", flagFromStore, v)
	}

	bucket, prefix, _ := strings.Cut(strings.Trim(u.Path, "/"), "/")
	if bucket == "" {
		return store.Destination{}, fmt.Errorf("--%s %q names no bucket: add it as the URL's path, https://HOST/BUCKET[/PREFIX]", flagFromStore, v)
	}

	d := store.Destination{Endpoint: u.Scheme + "://" + u.Host, Bucket: bucket, Prefix: prefix, Region: region,
		AccessKeyID: os.Getenv(envS3AccessKey), SecretAccessKey: os.Getenv(envS3SecretKey)}

	if d.AccessKeyID == "" && d.SecretAccessKey == "" {
		d.AccessKeyID, d.SecretAccessKey = os.Getenv(envAWSAccess), os.Getenv(envAWSSecret)
	}

	if d.AccessKeyID == "" || d.SecretAccessKey == "" {
		return store.Destination{}, fmt.Errorf("the store's credentials are missing: set $%s and $%s (or $%s and $%s) to the access key the TalosEtcdBackup used",
			envS3AccessKey, envS3SecretKey, envAWSAccess, envAWSSecret)
	}

	return d, nil
}

// recoverCluster runs the full-loss recovery.
func recoverCluster(ctx context.Context, cmd *cli.Command, cluster string) error {
	r, err := newRun(cmd)
	if err != nil {
		return err
	}

	var problems []error

	dest, err := parseStore(cmd.String(flagFromStore), cmd.String("region"))
	if err != nil {
		problems = append(problems, err)
	}

	file := cmd.String(flagIdentity)
	if file == "" {
		problems = append(problems, fmt.Errorf("--%s is missing: give a file holding an age identity (AGE-SECRET-KEY-1…) of one of the backup's recipients", flagIdentity))
	}

	switch cmd.String(flagInstall) {
	case initflow.InstallManifest, initflow.InstallNone:
	default:
		problems = append(problems, fmt.Errorf("--install %q: use manifest or none", cmd.String(flagInstall)))
	}

	if len(problems) > 0 {
		return fmt.Errorf("%w; nothing was changed", errors.Join(problems...))
	}

	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("reading the identity file: %w; nothing was changed", err)
	}

	ids, err := etcdbackup.ParseIdentities(data)
	if err != nil {
		return fmt.Errorf("the identity file %s: %w; nothing was changed", file, err)
	}

	st, err := secretstore.Open(cluster, r.errOut)
	if err != nil {
		return err
	}

	tty := false
	if f, ok := r.errOut.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}

	o := recoverflow.Options{
		Cluster: cluster, Namespace: cmd.String(flagNamespace), Snapshot: cmd.String(flagSnapshot), Store: dest, Identities: ids,
		TalosPort: cmd.Int(flagTalosPort), Install: cmd.String(flagInstall), InstallerImage: cmd.String(flagInstallerImage),
		WriteKubeconfig: cmd.String(flagWriteKubeconfig), DryRun: cmd.Bool(flagDryRun), Timeout: cmd.Duration(flagTimeout),
	}

	env := recoverflow.Env{
		Store:      st,
		Passphrase: secretstore.PromptPassphrase(cmd.String(flagPassphraseFile), os.Stdin, r.errOut),
		Progress:   initflow.NewProgress(r.errOut, tty),
		Out:        r.out,
		Confirm:    r.confirm,
		Version:    version.Get().Version,
		Scheme:     kube.Scheme(),
	}

	return recoverflow.Run(ctx, o, env)
}

// restoreConfirm lists the machines the recovery holds and lifts the holds.
func restoreConfirm(ctx context.Context, cmd *cli.Command, cluster string) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}

	held, err := recovery.Holds(ctx, r.c(), r.ns(), cluster)
	if err != nil {
		return r.conn.Explain(err, "listing the TalosMachines")
	}

	if len(held) == 0 {
		return fmt.Errorf("no TalosMachine of cluster %s in namespace %s is held by a recovery (annotation ichor.maesh.dev/hold-apply=%s): nothing to confirm",
			cluster, r.ns(), recoverflow.HoldValue)
	}

	t := &output.Rows{Header: []string{"MACHINE", colRole, colAddress, "DRIFT", colReason}}
	names := make([]string, 0, len(held))

	for _, h := range held {
		t.Add(h.Name, h.Role, h.Address, strconv.Itoa(len(h.Drift)), h.Reason)
		names = append(names, h.Name)
	}

	if err := t.Write(r.out); err != nil {
		return err
	}

	prompt := fmt.Sprintf("This lifts the recovery's hold from the %d machine(s) above: the controller then applies each one's rendered configuration "+
		"(drifted nodes are changed, workers in maintenance mode are re-installed).", len(held))

	if cmd.Bool(flagDryRun) {
		r.printf("%s\nNothing was changed (--dry-run).\n", prompt)

		return nil
	}

	if err := r.confirm(prompt, cluster); err != nil {
		return err
	}

	if err := recovery.ReleaseHolds(ctx, r.c(), r.ns(), names); err != nil {
		return r.conn.Explain(err, "lifting the holds")
	}

	r.printf("Lifted the hold from %d machine(s) of cluster %s; follow them with `ichor machine list --watch`.\n", len(held), cluster)

	return nil
}
