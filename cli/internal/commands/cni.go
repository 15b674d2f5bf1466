package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/valuesedit"
	"github.com/maeshinshin/ichor/contracts/pkg/clusterreq"
)

// flagEffective asks `cni values get` for the merged values.
const flagEffective = "effective"

// cniCommand is `ichor cni`: Cilium, the cluster's CNI and Ichor's own Helm release.
func cniCommand() *cli.Command {
	clusterFlag := &cli.StringFlag{Name: flagCluster, Usage: usageCluster}
	fileFlag := &cli.StringFlag{Name: flagFile, Aliases: []string{"f"}, TakesFile: true,
		Usage: "`FILE` holding the user's layer of Cilium Helm values, YAML or JSON (- reads standard input; an empty file removes the layer)"}
	return &cli.Command{
		Name:   "cni",
		Usage:  "Cilium, the cluster's CNI (Ichor's own Helm release)",
		Action: unknownSubcommand,
		Commands: []*cli.Command{{
			Name: "values",
			Usage: "the user's layer of Cilium's Helm values (spec.cni.cilium.values), between Ichor's defaults and the Ichor-owned keys; " +
				"changing it needs `update` on `talosclusters/cilium-values` (ichor-admin)",
			Action: unknownSubcommand,
			Commands: []*cli.Command{
				{
					Name:   cmdGet,
					Usage:  "print the user's layer as YAML (-o json for JSON); --effective prints the merged values Helm gets instead (read-only)",
					Flags:  []cli.Flag{clusterFlag, &cli.BoolFlag{Name: flagEffective, Usage: "print Ichor's defaults, the user's layer and the Ichor-owned keys merged"}},
					Action: cniValuesGet,
				},
				{
					Name:   "diff",
					Usage:  "check a proposed layer and print what it changes in the rendered Cilium objects; writes nothing",
					Flags:  []cli.Flag{clusterFlag, fileFlag},
					Action: cniValuesDiff,
				},
				{
					Name: cmdSet,
					Usage: "check a proposed layer, print what it changes in the rendered Cilium objects, ask, then write it as you " +
						"(the controller applies it with Helm); --dry-run stops after the diff",
					Flags:  []cli.Flag{clusterFlag, fileFlag, &cli.BoolFlag{Name: flagDryRun, Usage: "print the diff and write nothing"}},
					Action: cniValuesSet,
				},
				{
					Name:   "edit",
					Usage:  "edit the user's layer in $EDITOR; it is checked on save, its diff is shown, and you are asked before it is written",
					Flags:  []cli.Flag{clusterFlag},
					Action: cniValuesEdit,
				},
			},
		}, {
			Name: "upgrade",
			Usage: "move Ichor's Cilium Helm release (kube-system/cilium) to another chart this Ichor embeds, at most one minor up " +
				"(default: the newest such chart): a cni operation under the cluster lock, rolled back by Helm on failure; or list the charts",
			ArgsUsage: argsVersion,
			Flags: []cli.Flag{
				clusterFlag,
				&cli.BoolFlag{Name: flagList, Usage: "print the running Cilium version and the embedded charts (the default target marked), and change nothing"},
				&cli.BoolFlag{Name: flagWait, Usage: usageWaitOperation},
			},
			Action: cniUpgrade,
		}, {
			Name: "kube-proxy",
			Usage: "print the cluster's kube-proxy mode (spec.cni.kubeProxy), its KubeProxyConsistent condition and an unfinished switch; " +
				"or switch it: enabled (Talos runs kube-proxy) or replaced (Cilium replaces it), a kube-proxy operation under the cluster lock " +
				"that changes Cilium and Talos in the order that keeps Services proxied",
			ArgsUsage: argsKubeProxyMode,
			Flags:     []cli.Flag{clusterFlag, &cli.BoolFlag{Name: flagWait, Usage: usageWaitOperation}},
			Action:    cniKubeProxy,
		}, cniBootstrapCommand()},
	}
}

func cniValuesGet(ctx context.Context, cmd *cli.Command) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	c, err := r.getCluster(ctx, cmd.String(flagCluster))
	if err != nil {
		return err
	}
	v, err := valuesedit.Show(c, valuesedit.Nodes(c))
	if err != nil {
		return err
	}
	text := v.UserYAML
	if cmd.Bool(flagEffective) {
		text = v.EffectiveYAML
	}
	if r.format != output.Table {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(text), &m); err != nil {
			return err
		}
		if m == nil {
			m = map[string]any{}
		}
		return output.Object(r.out, r.format, m)
	}
	applied := "yes"
	if !v.Applied {
		applied = "not yet (the controller applies it with Helm; the CNIHandover condition says how it went)"
	}
	what := "The user's layer of Cilium values (spec.cni.cilium.values)"
	if cmd.Bool(flagEffective) {
		what = "The effective Cilium values (Ichor's defaults, the user's layer, the Ichor-owned keys; read-only)"
	}
	r.printf("# %s of TalosCluster %s.\n# Cilium chart %s; applied: %s.\n%s", what, c.Name, v.Version, applied, text)
	return nil
}

// readValuesFile reads --file; - is standard input.
func (r *run) readValuesFile(cmd *cli.Command) ([]byte, error) {
	f := cmd.String(flagFile)
	if f == "" {
		return nil, fmt.Errorf("`%s` needs --file FILE with the Cilium values (YAML or JSON; `ichor cni values get > FILE` writes the current ones)", cmd.FullName())
	}
	var data []byte
	var err error
	if f == "-" {
		data, err = io.ReadAll(r.in)
	} else {
		data, err = os.ReadFile(f)
	}
	if err != nil {
		return nil, fmt.Errorf("--file: %w", err)
	}
	return data, nil
}

// previewValues checks proposed with the shared rule and prints what it changes.
func (r *run) previewValues(ctx context.Context, c *ichorv1alpha1.TalosCluster, proposed []byte) (*valuesedit.Preview, error) {
	p, err := valuesedit.Compute(ctx, c, proposed, valuesedit.Nodes(c))
	var rf *valuesedit.Refused
	if errors.As(err, &rf) {
		return nil, refusalError("the Cilium values of TalosCluster "+c.Name, rf.Refusals)
	}
	if err != nil {
		return nil, err
	}
	human := r.out
	if r.format != output.Table {
		human = r.errOut
	}
	writeValuesPreview(human, c.Name, p)
	return p, nil
}

func writeValuesPreview(w io.Writer, cluster string, p *valuesedit.Preview) {
	if !p.Changed() {
		_, _ = fmt.Fprintf(w, "The Cilium values of TalosCluster %s: the rendered Cilium %s objects do not change.\n", cluster, p.Version)
		return
	}
	_, _ = fmt.Fprintf(w, "The Cilium values of TalosCluster %s change %d rendered Cilium %s object(s):\n", cluster, len(p.Objects), p.Version)
	for _, o := range p.Objects {
		_, _ = fmt.Fprintf(w, "  %-8s %s\n", o.Change, o.Object)
	}
	_, _ = fmt.Fprintf(w, "\n%s", p.Diff)
}

// previewOut is the preview printed with -o yaml|json.
type previewOut struct {
	Cluster      string                    `json:"cluster"`
	ChartVersion string                    `json:"chartVersion"`
	Changed      bool                      `json:"changed"`
	Objects      []valuesedit.ObjectChange `json:"objects"`
	Written      bool                      `json:"written"`
}

func (r *run) printPreviewObject(c *ichorv1alpha1.TalosCluster, p *valuesedit.Preview, written bool) error {
	return output.Object(r.out, r.format, previewOut{Cluster: c.Name, ChartVersion: p.Version, Changed: p.Changed(), Objects: p.Objects, Written: written})
}

func cniValuesDiff(ctx context.Context, cmd *cli.Command) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	data, err := r.readValuesFile(cmd)
	if err != nil {
		return err
	}
	c, err := r.getCluster(ctx, cmd.String(flagCluster))
	if err != nil {
		return err
	}
	p, err := r.previewValues(ctx, c, data)
	if err != nil {
		return err
	}
	if r.format != output.Table {
		return r.printPreviewObject(c, p, false)
	}
	return nil
}

func cniValuesSet(ctx context.Context, cmd *cli.Command) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	data, err := r.readValuesFile(cmd)
	if err != nil {
		return err
	}
	c, err := r.getCluster(ctx, cmd.String(flagCluster))
	if err != nil {
		return err
	}
	return r.setValues(ctx, cmd, c, data)
}

// setValues previews, asks and writes a proposed layer.
func (r *run) setValues(ctx context.Context, cmd *cli.Command, c *ichorv1alpha1.TalosCluster, data []byte) error {
	p, err := r.previewValues(ctx, c, data)
	if err != nil {
		return err
	}
	if cmd.Bool(flagDryRun) {
		if r.format != output.Table {
			return r.printPreviewObject(c, p, false)
		}
		r.printf("\nDry run: nothing was written; run the command again without --dry-run to write it.\n")
		return nil
	}
	if err := r.confirm(fmt.Sprintf("\nWrite these Cilium values to TalosCluster %s (the controller then applies them with Helm, which may restart Cilium's pods).", c.Name), c.Name); err != nil {
		return err
	}
	res, err := clusterreq.SetCiliumValues(ctx, r.c(), client.ObjectKeyFromObject(c), data)
	var rf *clusterreq.Refused
	if errors.As(err, &rf) {
		return refusalError("changing the Cilium values of TalosCluster "+c.Name, rf.Refusals)
	}
	if err != nil {
		return fmt.Errorf("%w; nothing was written", r.conn.Explain(err, "changing the Cilium values of TalosCluster "+c.Name))
	}
	if r.format != output.Table {
		return r.printPreviewObject(c, p, res.Changed)
	}
	if !res.Changed {
		r.printf("\nThe Cilium values of TalosCluster %s already were these; nothing was written.\n", c.Name)
		return nil
	}
	r.printf("\nThe Cilium values of TalosCluster %s are written. The controller applies them with Helm; "+
		"`ichor cni values get --cluster %s` says when they are applied.\n", c.Name, c.Name)
	return nil
}

// valuesEditHeader heads the file $EDITOR opens.
const valuesEditHeader = `# Edit the user's layer of Cilium Helm values of TalosCluster %s (spec.cni.cilium.values).
# Ichor-owned keys are refused: %s.
# Save and quit to see what changes in the rendered objects; an unchanged file cancels.
`

func cniValuesEdit(ctx context.Context, cmd *cli.Command) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	c, err := r.getCluster(ctx, cmd.String(flagCluster))
	if err != nil {
		return err
	}
	v, err := valuesedit.Show(c, valuesedit.Nodes(c))
	if err != nil {
		return err
	}
	original := fmt.Sprintf(valuesEditHeader, c.Name, strings.Join(ciliumvalues.OwnedKeys(), ", ")) + v.UserYAML
	text := original
	for {
		edited, err := r.runEditor(text)
		if err != nil {
			return err
		}
		if stripComments(edited) == stripComments(original) {
			return fmt.Errorf("edit cancelled: the file was left unchanged; the Cilium values of TalosCluster %s were not changed", c.Name)
		}
		_, problem := valuesedit.Parse([]byte(edited))
		if problem == nil {
			return r.setValues(ctx, cmd, c, []byte(edited))
		}
		if stripComments(edited) == stripComments(text) {
			// Saved again without a change after an error: stop.
			return fmt.Errorf("%w; the Cilium values of TalosCluster %s were not changed", problem, c.Name)
		}
		_, _ = fmt.Fprintf(r.errOut, "error: %v\n", problem)
		text = "# Error: " + strings.ReplaceAll(problem.Error(), "\n", "\n# ") + "\n#\n" + stripComments(edited)
	}
}
