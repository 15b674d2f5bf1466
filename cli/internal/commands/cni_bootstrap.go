package commands

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"github.com/urfave/cli/v3"

	"github.com/maeshinshin/ichor/cli/internal/adoptflow"
	"github.com/maeshinshin/ichor/cli/internal/output"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
)

// cniBootstrapCommand is `ichor cni bootstrap`: Ichor's pinned Cilium for a
// Talos cluster that has no pod network yet, before Ichor is installed with
// Helm (whose chart refuses such a cluster: preflight.cni). It is the same
// Cilium step as `ichor adopt` (architecture, "Deployment").
func cniBootstrapCommand() *cli.Command {
	return &cli.Command{
		Name: "bootstrap",
		Usage: "install Ichor's pinned Cilium into a Talos cluster with no pod network (the case the Helm chart's preflight.cni refuses), " +
			"as Helm release kube-system/cilium, then wait for every Node to be Ready; --plan shows the check and writes nothing",
		Description: "cni bootstrap reads the control plane given with --node over the Talos API with your own talosconfig (its credentials\n" +
			"only): its configuration (Kubernetes version, kube-proxy) and the admin kubeconfig, as `talosctl kubeconfig` does. Over the\n" +
			"Kubernetes API it reads the Nodes and the running CNI, then each Node's KubePrism over the Talos API at the Node's internal\n" +
			"address. It refuses another CNI, a Cilium that is not a Helm release (that cluster has a pod network already), KubePrism off\n" +
			"port " + strconv.Itoa(ciliumvalues.KubePrismPort) + " or unhealthy, and a Node without a pod CIDR, writing nothing. Then it asks you to type the cluster's\n" +
			"name (--yes in scripts), installs the chart in process with Ichor's values, the same install `ichor adopt` runs for a cluster\n" +
			"with no CNI, and waits until every Node is Ready. A second run finds the release deployed and only waits; after a failure it\n" +
			"continues. Ichor itself is not installed: install it next (`helm install`), or run `ichor adopt`, which takes this release\n" +
			"over as Ichor's.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: flagPlan, Usage: "show the check and what would be installed, and stop: read-only"},
			&cli.StringFlag{Name: flagTalosconfig, Usage: "your talosconfig `FILE` for the cluster (its current context's credentials; read here, sent nowhere)", TakesFile: true},
			&cli.StringFlag{Name: flagNode, Usage: "`ADDRESS` of a control plane of the cluster (its Talos API)"},
			&cli.IntFlag{Name: flagTalosPort, Usage: usageTalosPort},
			&cli.StringFlag{Name: "cni-tunnel", Value: ciliumvalues.TunnelVXLAN, Usage: "Cilium's tunnel `PROTOCOL`: vxlan or geneve"},
		},
		Action: cniBootstrap,
	}
}

func cniBootstrap(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Present() {
		return fmt.Errorf("`%s` takes no arguments (the control plane is --node ADDRESS); run `%s --help`", cmd.FullName(), cmd.FullName())
	}

	r, err := newRun(cmd)
	if err != nil {
		return err
	}

	file, addr, tunnel := cmd.String(flagTalosconfig), cmd.String(flagNode), cmd.String("cni-tunnel")

	switch {
	case file == "":
		return errors.New("--talosconfig is required: your talosconfig for the cluster (for example the file `talosctl gen config` wrote); it is read here and sent nowhere")
	case addr == "":
		return errors.New("--node is required: the address of a control plane of the cluster (its Talos API)")
	case tunnel != ciliumvalues.TunnelVXLAN && tunnel != ciliumvalues.TunnelGeneve:
		return fmt.Errorf("--cni-tunnel %q is not a tunnel protocol Ichor's Cilium uses: give vxlan or geneve", tunnel)
	}

	if _, err := netip.ParseAddr(addr); err != nil {
		return fmt.Errorf("--node %q is not an IP address; give the address the control plane's Talos API answers on", addr)
	}

	talosconfig, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("reading --talosconfig: %w", err)
	}

	p, err := adoptflow.PlanBootstrap(ctx, adoptflow.BootstrapOptions{
		Talosconfig: talosconfig, TalosPort: cmd.Int(flagTalosPort), ControlPlane: addr, Tunnel: tunnel,
	})
	if err != nil {
		return fmt.Errorf("%w; nothing was changed", err)
	}

	if r.format != output.Table {
		if err := output.Object(r.out, r.format, p); err != nil {
			return err
		}
	} else if err := r.printBootstrapPlan(p, cmd.Bool(flagPlan)); err != nil {
		return err
	}

	if err := refusalError("installing Cilium into cluster "+p.Cluster, p.Refusals); err != nil || cmd.Bool(flagPlan) {
		return err
	}

	if p.Install != nil {
		if err := r.confirm(fmt.Sprintf("\nInstalling Cilium %s into cluster %s creates Helm release %s/%s and the cluster's pod network.",
			p.Install.Chart, p.Cluster, cilium.Namespace, cilium.ReleaseName), p.Cluster); err != nil {
			return err
		}
	}

	if err := adoptflow.Bootstrap(ctx, p, r.progress()); err != nil {
		return err
	}

	r.printf("\nCluster %s has a pod network: Cilium runs as Helm release %s/%s. Install Ichor next (`helm install`; preflight.cni passes now), "+
		"or run `ichor adopt`, which takes this release over as Ichor's.\n", p.Cluster, cilium.Namespace, cilium.ReleaseName)

	return nil
}

// printBootstrapPlan shows the check: the cluster, each Node's KubePrism and
// what the install does.
func (r *run) printBootstrapPlan(p *adoptflow.BootstrapPlan, planOnly bool) error {
	r.printf("Cilium bootstrap plan for cluster %s (read-only: nothing was written)\n\n", orDash(p.Cluster))

	var b output.Block
	b.Add("Kubernetes", orDash(p.KubernetesVersion))
	b.Add("kube-proxy", p.KubeProxy)
	b.Add("tunnel", p.Tunnel)

	for _, m := range p.Machines {
		prism := textOff
		if m.KubePrismPort != 0 {
			prism = "port " + strconv.Itoa(m.KubePrismPort)
			if !m.KubePrismHealthy {
				prism += ", not healthy"
			} else {
				prism += ", healthy"
			}
		}

		b.Add("Node "+m.Node, fmt.Sprintf("%s, KubePrism %s", m.Address, prism))
	}

	if err := b.Write(r.out); err != nil {
		return err
	}

	switch {
	case p.Running != "":
		r.printf("\nCilium runs already (%s): nothing is installed; the command waits for every Node to be Ready.\n", p.Running)
	case p.Install != nil && !p.Refused():
		r.printf("\nCilium install: the cluster runs no CNI; Ichor's pinned Cilium %s is installed in process as Helm release %s/%s "+
			"(for %d Node(s)), then every Node is waited for to be Ready.\n", p.Install.Chart, cilium.Namespace, cilium.ReleaseName, p.Install.Nodes)

		if planOnly {
			r.printf("Nothing was written. To install it, run the same command without --plan.\n")
		}
	}

	return nil
}
