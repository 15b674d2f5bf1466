// Package commands holds the commands of the ichor CLI. Every write goes
// through the custom resources, exactly as the web UI's do, after the shared
// refusals of contracts/pkg/guard and the version-skew check (skew.go).
package commands

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/kube"
	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Global flag names.
const (
	flagKubeconfig = "kubeconfig"
	flagContext    = "context"
	flagNamespace  = "namespace"
	flagOutput     = "output"
	flagYes        = "yes"
	// flagPlan asks adopt and cni bootstrap for their read-only plan.
	flagPlan = "plan"
)

// Shared names.
const (
	// flagCluster names a TalosCluster, or the secrets store of a cluster.
	flagCluster = "cluster"
	// argMachine is the positional argument of the machine commands.
	argMachine = "MACHINE"
	// colName heads the first column of the tables.
	colName = "NAME"
	// colAge heads the age column of the tables.
	colAge = "AGE"
	// flagNode is init's first node.
	flagNode = "node"
	// flagRole is the role flag of approve, config and user create.
	flagRole = "role"
	// cmdList and cmdGet name the list and get subcommands.
	cmdList = "list"
	cmdGet  = "get"
	// cmdSet names the subcommands that write what get prints.
	cmdSet = "set"
	// flagWatch keeps printing changes; flagWait follows a write until it is done.
	flagWatch = "watch"
	flagWait  = "wait"
	// colRole, colPhase, colStep, colType, colReason, colStatus and colMessage head table columns.
	colRole    = "ROLE"
	colPhase   = "PHASE"
	colStep    = "STEP"
	colType    = "TYPE"
	colReason  = "REASON"
	colStatus  = "STATUS"
	colMessage = "MESSAGE"
	// colTalos heads the Talos version columns.
	colTalos = "TALOS"
	// wordYes is how a table shows a true flag.
	wordYes = "yes"
	// colAddress heads the address columns; argAddress is the address argument.
	colAddress = "ADDRESS"
	argAddress = colAddress
	// flagTimeout bounds a --wait.
	flagTimeout = "timeout"
	// flagOverride goes past a refusal the override verb may pass.
	flagOverride = "override"
	// usageWaitOperation is the usage of --wait on a command that starts an operation.
	usageWaitOperation = "follow the operation until it ends; the exit status is non-zero unless it succeeded"
	// colStage heads the stage columns.
	colStage = "STAGE"
	// usageCluster is the usage of the --cluster flag of the commands on one cluster.
	usageCluster = "TalosCluster `NAME` (default: the only one in the namespace)"
)

// New returns the ichor command.
func New() *cli.Command {
	root := &cli.Command{
		Name:                  "ichor",
		Usage:                 "manage Talos Linux clusters through Kubernetes custom resources",
		EnableShellCompletion: true,
		// The completion command is hidden by default; it is part of the CLI.
		ConfigureShellCompletionCommand: func(c *cli.Command) { c.Hidden = false },
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagKubeconfig, Usage: "kubeconfig `FILE` (default: $KUBECONFIG, then ~/.kube/config)", TakesFile: true},
			&cli.StringFlag{Name: flagContext, Usage: "kubeconfig `CONTEXT` (default: the current context)"},
			&cli.StringFlag{Name: flagNamespace, Aliases: []string{"n"}, Usage: "`NAMESPACE` of the Ichor resources (default: the context's namespace, else default)"},
			&cli.StringFlag{Name: flagOutput, Aliases: []string{"o"}, Value: output.Table, Usage: "output `FORMAT`: table, yaml or json",
				Validator: func(s string) error { _, err := output.ParseFormat(s); return err }},
			&cli.BoolFlag{Name: flagYes, Aliases: []string{"y"}, Usage: "do not ask for confirmation"},
		},
		// Without an action, urfave/cli answers an unknown command with help and
		// success; a typo must fail instead, and say what to run.
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Present() {
				return fmt.Errorf("unknown command %q: run `ichor --help` for the list of commands", cmd.Args().First())
			}
			return cli.ShowRootCommandHelp(cmd)
		},
		Commands: []*cli.Command{
			versionCommand(),
			initCommand(),
			adoptCommand(),
			clusterCommand(),
			machineCommand(),
			nodeCommand(),
			configCommand(),
			patchCommand(),
			cniCommand(),
			operationCommand(),
			upgradeCommand(),
			etcdCommand(),
			restoreCommand(),
			secretsCommand(),
			userCommand(),
			settingsCommand(),
			authCommand(),
			uiCommand(),
		},
	}
	// Repeatable flags are repeated (--label a=1 --label b=2): a comma is part
	// of a value, as in --disk userVolume=serial=S,volume=data. urfave/cli
	// reads the setting of the command being run, so every command carries it.
	var disable func(c *cli.Command)
	disable = func(c *cli.Command) {
		c.DisableSliceFlagSeparator = true
		for _, sub := range c.Commands {
			disable(sub)
		}
	}
	disable(root)
	return root
}

// unknownSubcommand makes a command group fail on a typo instead of printing help.
func unknownSubcommand(_ context.Context, cmd *cli.Command) error {
	if cmd.Args().Present() {
		return fmt.Errorf("unknown command %q: run `%s --help` for the list of commands", cmd.Args().First(), cmd.FullName())
	}
	return cli.ShowSubcommandHelp(cmd)
}

// run is one invocation: where it prints and how, and the connection.
type run struct {
	cmd    *cli.Command
	out    io.Writer
	errOut io.Writer
	in     io.Reader
	format string
	conn   *kube.Conn
	// skew is the version-skew check of conn's writes (skew.go).
	skew *skewCheck
}

func newRun(cmd *cli.Command) (*run, error) {
	root := cmd.Root()
	format, err := output.ParseFormat(cmd.String(flagOutput))
	if err != nil {
		return nil, err
	}
	r := &run{cmd: cmd, out: root.Writer, errOut: root.ErrWriter, in: root.Reader, format: format}
	if r.out == nil {
		r.out = os.Stdout
	}
	if r.errOut == nil {
		r.errOut = os.Stderr
	}
	if r.in == nil {
		r.in = os.Stdin
	}
	return r, nil
}

// connected is newRun plus a connection to the API server.
func connected(cmd *cli.Command) (*run, error) {
	r, err := newRun(cmd)
	if err != nil {
		return nil, err
	}
	r.conn, err = kube.Connect(kube.Options{
		Kubeconfig: cmd.String(flagKubeconfig),
		Context:    cmd.String(flagContext),
		Namespace:  cmd.String(flagNamespace),
	})
	if err != nil {
		return nil, err
	}
	r.guardWrites()
	return r, nil
}

func (r *run) c() client.WithWatch { return r.conn.Client }
func (r *run) ns() string          { return r.conn.Namespace }

func (r *run) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(r.out, format, args...)
}

func (r *run) warnf(format string, args ...any) {
	_, _ = fmt.Fprintf(r.errOut, "warning: "+format+"\n", args...)
}

// serverVersion is the Ichor release the cluster runs, from the
// IchorInstallation's status; "" when Ichor is not installed or has not
// reported it.
func (r *run) serverVersion(ctx context.Context, c client.Reader) (string, error) {
	inst := &ichorv1alpha1.IchorInstallation{}
	err := c.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, inst)
	switch {
	case err == nil:
		return inst.Status.InstalledVersion, nil
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return "", nil
	default:
		return "", r.conn.Explain(err, "reading the IchorInstallation to compare its version with this ichor's before writing")
	}
}

// confirm asks the person to type want, unless --yes. It always precedes a
// write, so a version skew already found refuses here, before anyone types.
func (r *run) confirm(prompt, want string) error {
	if err := r.refused(); err != nil {
		return err
	}
	if r.cmd.Bool(flagYes) {
		return nil
	}
	_, _ = fmt.Fprintf(r.errOut, "%s\nType %q to confirm: ", prompt, want)
	line, err := bufio.NewReader(r.in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	got := strings.TrimSpace(line)
	if got == "" && errors.Is(err, io.EOF) {
		return errors.New("not confirmed: no answer on standard input; nothing was changed (pass --yes to skip the confirmation in scripts)")
	}
	if got != want {
		return fmt.Errorf("not confirmed: the answer was not %q; nothing was changed", want)
	}
	return nil
}

// conditionsTable is the table of an object's conditions.
func conditionsTable(conds []metav1.Condition) *output.Rows {
	t := &output.Rows{Header: []string{colType, colStatus, colReason, colMessage}}
	for _, c := range conds {
		t.Add(c.Type, string(c.Status), c.Reason, c.Message)
	}
	return t
}

// requireOneArg checks that there is exactly one positional argument.
func requireOneArg(cmd *cli.Command, usage string) error {
	if cmd.Args().Len() != 1 {
		return fmt.Errorf("`%s` takes %s; run `%s --help`", cmd.FullName(), usage, cmd.FullName())
	}
	return nil
}

// textOff shows a setting that is off.
const textOff = "off"
