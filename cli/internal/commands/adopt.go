package commands

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/urfave/cli/v3"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// flagTalosconfig names the operator's own talosconfig file.
const flagTalosconfig = "talosconfig"

// errAdoptWriteUnavailable is the refusal of `ichor adopt` without --plan:
// this release plans an adoption and writes none.
var errAdoptWriteUnavailable = errors.New("writing an adoption is not available in this release: nothing was read or written. " +
	"`ichor adopt --plan` shows what adoption would do (versions, CNI, drift of each machine) and writes nothing")

// adoptCommand is `ichor adopt --plan`: the read-only first phase of an
// adoption (architecture, "ichor adopt"), with the operator's own
// talosconfig. The decisions are contracts/pkg/adopt's.
func adoptCommand() *cli.Command {
	return &cli.Command{
		Name:  "adopt",
		Usage: "plan bringing a running Talos cluster Ichor did not create under management (this release: --plan only, read-only)",
		Description: "adopt --plan reads every node given with --node over the Talos API with your own talosconfig (its credentials only; its\n" +
			"endpoints are ignored): the Talos and Kubernetes versions, the CNI and where it came from, kube-proxy, KubePrism, the inline\n" +
			"manifests and each machine's live configuration. It picks the version contract (probed from the running version down to\n" +
			"v1.12, the one with the fewest unrepresentable paths; --version-contract overrides it), renders each machine as Ichor would\n" +
			"and sorts every difference: A (representable: stored as patches or spec fields), B (Ichor-owned: changed by the first render,\n" +
			"needs consent) and C (blocks the machine). It refuses Talos older than v1.12 or mixed versions, an unknown version, two\n" +
			"CNIs, a Cilium whose IPAM is not kubernetes, and another CNI without --cni-unmanaged. It writes nothing, to Kubernetes or\n" +
			"to a node, and stores nothing locally. Writing the adoption is not available in this release.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "plan", Usage: "show what adoption would do and stop: read-only (required in this release)"},
			&cli.StringFlag{Name: flagTalosconfig, Usage: "your talosconfig `FILE` for the cluster (its current context's credentials; read here, sent nowhere)", TakesFile: true},
			&cli.StringSliceFlag{Name: flagNode, Usage: "`ADDRESS` of a machine of the cluster, control planes and workers (repeat it for each)"},
			&cli.IntFlag{Name: flagTalosPort, Usage: usageTalosPort},
			&cli.StringFlag{Name: "secrets-bundle", Usage: "the cluster's secrets bundle `FILE` (what `talosctl gen secrets` wrote)", TakesFile: true},
			&cli.BoolFlag{Name: "recover-secrets", Usage: "rebuild the secrets bundle from a control plane's configuration, read-only (kept in memory by --plan)"},
			&cli.StringFlag{Name: "recover-from", Usage: "the control plane `ADDRESS` --recover-secrets reads (default: the first control plane given)"},
			&cli.StringFlag{Name: "version-contract", Usage: "render with this version `CONTRACT` (v1.12 up to the running version) instead of the probe's choice"},
			&cli.BoolFlag{Name: "cni-unmanaged", Usage: "keep a CNI other than Cilium as it is (spec.cni.preset: unmanaged)"},
		},
		Action: adoptAction,
	}
}

func adoptAction(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Present() {
		return fmt.Errorf("`%s` takes no arguments (the machines are --node ADDRESS); run `%s --help`", cmd.FullName(), cmd.FullName())
	}

	if !cmd.Bool("plan") {
		return errAdoptWriteUnavailable
	}

	r, err := newRun(cmd)
	if err != nil {
		return err
	}

	file := cmd.String(flagTalosconfig)
	if file == "" {
		return errors.New("--talosconfig is required: your talosconfig for the cluster (for example the file `talosctl gen config` wrote); it is read here and sent nowhere")
	}

	nodes := cmd.StringSlice(flagNode)
	if len(nodes) == 0 {
		return errors.New("--node is required: give the address of every machine of the cluster, control planes and workers (--node A --node B ...)")
	}

	for _, n := range nodes {
		if _, err := netip.ParseAddr(n); err != nil {
			return fmt.Errorf("--node %q is not an IP address; give the address the machine's Talos API answers on", n)
		}
	}

	bundleFile, recoverSecrets, recoverFrom := cmd.String("secrets-bundle"), cmd.Bool("recover-secrets"), cmd.String("recover-from")

	switch {
	case bundleFile != "" && recoverSecrets:
		return errors.New("--secrets-bundle and --recover-secrets exclude each other: give the bundle file, or rebuild it from a control plane")
	case bundleFile == "" && !recoverSecrets:
		return errors.New("the cluster's secrets bundle is needed to compare each machine with what Ichor renders: give --secrets-bundle FILE " +
			"(the file `talosctl gen secrets` wrote) or --recover-secrets (rebuilt from a control plane's configuration)")
	case recoverFrom != "" && !recoverSecrets:
		return errors.New("--recover-from names the control plane --recover-secrets reads: give --recover-secrets too")
	case recoverFrom != "" && !slices.Contains(nodes, recoverFrom):
		return fmt.Errorf("--recover-from %s is not among the --node addresses", recoverFrom)
	}

	talosconfig, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("reading --talosconfig: %w", err)
	}

	machines := make([]adopt.Machine, 0, len(nodes))
	o := adopt.Options{VersionContract: cmd.String("version-contract"), CNIUnmanaged: cmd.Bool("cni-unmanaged")}

	for _, addr := range nodes {
		m, members, err := readForAdoption(ctx, addr, cmd.Int(flagTalosPort), talosconfig, o.EtcdMembers == nil)
		if err != nil {
			return err
		}

		machines = append(machines, m)

		if members != nil {
			o.EtcdMembers = members
		}
	}

	if o.Bundle, err = adoptionBundle(machines, bundleFile, recoverFrom); err != nil {
		return err
	}

	p, err := adopt.Build(machines, o)
	if err != nil {
		return err
	}

	if r.format != output.Table {
		if err := output.Object(r.out, r.format, p); err != nil {
			return err
		}
	} else if err := r.printAdoptionPlan(p); err != nil {
		return err
	}

	return refusalError("adopting cluster "+p.Cluster.Name, p.Refusals)
}

// readForAdoption reads one node with the operator's talosconfig and, when
// asked and the node is a control plane, the etcd members it lists.
func readForAdoption(ctx context.Context, addr string, port int, talosconfig []byte, wantMembers bool) (adopt.Machine, []string, error) {
	n, err := talos.DialTalosconfigNode(ctx, addr, port, talosconfig)
	if err != nil {
		return adopt.Machine{}, nil, err
	}
	defer n.Close()

	m, err := adopt.Read(ctx, n, addr)
	if err != nil {
		return adopt.Machine{}, nil, fmt.Errorf("reading %s with the talosconfig: %s; is it a configured machine of this cluster, and the talosconfig this cluster's (os:admin)?", addr, talos.Message(err))
	}

	if !wantMembers {
		return m, nil, nil
	}

	cfg, err := adopt.ParseConfig(m.Config)
	if err != nil || !cfg.Machine().Type().IsControlPlane() {
		return m, nil, nil // Build reports a configuration that does not load
	}

	list, err := n.EtcdMembers(ctx)
	if err != nil {
		return adopt.Machine{}, nil, fmt.Errorf("listing the etcd members through %s: %s; adoption needs a healthy etcd", addr, talos.Message(err))
	}

	members := make([]string, 0, len(list))
	for _, mem := range list {
		members = append(members, mem.Hostname)
	}

	return m, members, nil
}

// adoptionBundle is the secrets bundle: the file's, or one rebuilt from a
// control plane's configuration (in memory: --plan stores nothing).
func adoptionBundle(machines []adopt.Machine, file, recoverFrom string) (*secrets.Bundle, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading --secrets-bundle: %w", err)
		}

		contract := release.DefaultVersionContract
		if cs, err := adopt.ContractCandidates(machines[0].TalosVersion); err == nil {
			contract = cs[0]
		}

		b, err := bundle.Decode(data, contract)
		if err != nil {
			return nil, fmt.Errorf("--secrets-bundle %s: %w; give the file `talosctl gen secrets` wrote for this cluster", file, err)
		}

		return b, nil
	}

	for _, m := range machines {
		if recoverFrom != "" && m.Address != recoverFrom {
			continue
		}

		cfg, err := adopt.ParseConfig(m.Config)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Address, err)
		}

		if !cfg.Machine().Type().IsControlPlane() {
			if recoverFrom != "" {
				return nil, fmt.Errorf("--recover-from %s is a worker: its configuration has no CA keys; name a control plane", recoverFrom)
			}

			continue
		}

		b, err := secrets.NewBundleFromConfig(secrets.NewClock(), cfg)
		if err != nil {
			return nil, fmt.Errorf("rebuilding the secrets bundle from %s: %w", m.Address, err)
		}

		return b, nil
	}

	return nil, errors.New("--recover-secrets reads a control plane's configuration, and none of the --node addresses is a control plane")
}

// printAdoptionPlan prints the plan for people.
func (r *run) printAdoptionPlan(p *adopt.Plan) error {
	c := p.Cluster

	r.printf("Adoption plan for cluster %s (read-only: nothing was written, no change was sent to a node)\n\n", orDash(c.Name))

	var b output.Block
	b.Add("endpoint", c.Endpoint)
	b.Add("cluster ID", c.ID)
	b.Add("Talos", c.TalosVersion)
	b.Add("Kubernetes", c.KubernetesVersion)

	if c.VersionContract != "" {
		scores := make([]string, 0, len(c.Probe))
		for _, s := range c.Probe {
			if s.Error != "" {
				scores = append(scores, s.Contract+": cannot render")
			} else {
				scores = append(scores, fmt.Sprintf("%s: %d unrepresentable", s.Contract, s.Unrepresentable))
			}
		}

		how := "probed"
		if c.ContractSource == "flag" {
			how = "--version-contract"
		}

		b.Add("version contract", fmt.Sprintf("%s (%s; %s)", c.VersionContract, how, strings.Join(scores, ", ")))
	}

	b.Add("CNI", adoptionCNI(c))
	b.Add("Talos CNI setting", c.TalosCNI)
	b.Add("kube-proxy", map[bool]string{true: "enabled (Talos deploys it)", false: "disabled"}[c.KubeProxy])

	prism := "off"
	if c.KubePrismPort != 0 {
		prism = "port " + strconv.Itoa(c.KubePrismPort)
	}

	b.Add("KubePrism", prism)

	for _, m := range c.InlineManifests {
		b.Add("inline manifest", fmt.Sprintf("%s: %s", m.Name, strings.Join(m.Objects, ", ")))
	}

	for _, u := range c.ExtraManifests {
		b.Add("extra manifest", u)
	}

	b.Add("pod subnets", strings.Join(c.PodSubnets, ", "))
	b.Add("service subnets", strings.Join(c.ServiceSubnets, ", "))

	if err := b.Write(r.out); err != nil {
		return err
	}

	r.printf("\n")

	t := output.Rows{Header: []string{colAddress, "HOSTNAME", colRole, "TALOS", "KUBERNETES", "A", "B", "C", colStatus}}
	for _, m := range p.Machines {
		st := "adoptable"

		switch {
		case m.Drift == nil:
			st = "not compared"
		case m.Blocked:
			st = "blocked"
		}

		t.Add(m.Address, m.Hostname, m.Role, m.TalosVersion, m.KubernetesVersion,
			strconv.Itoa(adopt.Count(m.Drift, adopt.ClassRepresentable)), strconv.Itoa(adopt.Count(m.Drift, adopt.ClassIchorOwned)),
			strconv.Itoa(adopt.Count(m.Drift, adopt.ClassBlocking)), st)
	}

	if err := t.Write(r.out); err != nil {
		return err
	}

	for _, m := range p.Machines {
		if len(m.Drift) == 0 {
			continue
		}

		r.printf("\n%s (%s): differences from what Ichor would render\n", m.Address, m.Role)

		for _, d := range m.Drift {
			r.printf("  %s  %-7s  %s: %s\n", d.Class, d.Op, d.Path, d.Why)
		}

		if m.Hint != "" {
			r.printf("  blocked: %s\n", m.Hint)
		}
	}

	r.printf("\nA: representable (stored as patches or spec fields); B: Ichor-owned (the first render changes it; needs consent, does not block); " +
		"C: blocks the machine.\n")

	for _, w := range p.Warnings {
		r.warnf("%s", w)
	}

	if !p.Refused() {
		r.printf("Writing the adoption is not available in this release; nothing was written.\n")
	}

	return nil
}

// adoptionCNI is the CNI line: what runs and what adoption makes of it.
func adoptionCNI(c adopt.ClusterPlan) string {
	found := "none in the machine configuration (a CNI installed with Helm or kubectl is not read by this plan)"

	if len(c.CNIs) > 0 {
		parts := make([]string, len(c.CNIs))
		for i, x := range c.CNIs {
			parts[i] = x.String()
		}

		found = strings.Join(parts, " and ")
	}

	switch c.CNIPreset {
	case ichorv1alpha1.CNIPresetCilium:
		if len(c.CNIs) == 0 {
			return found + "; adoption would install Ichor's Cilium (spec.cni.preset: cilium)"
		}

		return found + "; taken over as Ichor's Cilium (spec.cni.preset: cilium)"
	case ichorv1alpha1.CNIPresetUnmanaged:
		return found + "; left as it is (spec.cni.preset: unmanaged)"
	default:
		return found
	}
}
