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
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/urfave/cli/v3"

	"github.com/maeshinshin/ichor/cli/internal/adoptflow"
	"github.com/maeshinshin/ichor/cli/internal/initflow"
	"github.com/maeshinshin/ichor/cli/internal/output"
	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// flagTalosconfig names the operator's own talosconfig file.
const flagTalosconfig = "talosconfig"

// The Cilium takeover's consents.
const (
	flagAcceptCiliumDiff    = "accept-cilium-diff"
	flagAcceptCiliumChanges = "accept-cilium-changes"
)

// adoptCommand is `ichor adopt`: the read-only plan (--plan), the write
// phase, and the release of the hold (--release), with the operator's own
// talosconfig. The decisions are contracts/pkg/adopt's, the steps
// cli/internal/adoptflow's.
func adoptCommand() *cli.Command {
	return &cli.Command{
		Name:  "adopt",
		Usage: "bring a running Talos cluster Ichor did not create under management: --plan, then write (every machine held), then --release",
		Description: "adopt --plan reads every node given with --node over the Talos API with your own talosconfig (its credentials only; its\n" +
			"endpoints are ignored): the Talos and Kubernetes versions, the CNI and where it came from, kube-proxy, KubePrism, the inline\n" +
			"manifests and each machine's live configuration. It picks the version contract (probed from the running version down to\n" +
			"v1.12, the one with the fewest unrepresentable paths; --version-contract overrides it), renders each machine as Ichor would\n" +
			"and sorts every difference: A (representable: stored as patches or spec fields), B (Ichor-owned: changed by the first render,\n" +
			"needs consent) and C (blocks the machine). It refuses Talos older than v1.12 or mixed versions, an unknown version, two\n" +
			"CNIs, a Cilium whose IPAM is not kubernetes, and another CNI without --cni-unmanaged. --plan writes nothing, to Kubernetes or\n" +
			"to a node, and stores nothing locally.\n\n" +
			"Without --plan, adopt shows the same plan, asks you to type the cluster's name (your consent to the B differences; --yes in\n" +
			"scripts), stores the secrets bundle in ~/.ichor/clusters/NAME, reads the admin kubeconfig from a control plane, installs Ichor\n" +
			"(--install) and writes the bundle Secret, the TalosCluster (annotation " + ichorv1alpha1.AdoptedAnnotation + "), a TalosConfigPatch per\n" +
			"machine with class A documents and the TalosMachines, each held (" + ichorv1alpha1.HoldApplyAnnotation + "=" + adopt.HoldValue + "): the\n" +
			"controller reports drift and applies nothing. A blocked worker is left out; a blocked control plane stops the write. Nothing\n" +
			"is sent to a node.\n\n" +
			"A Cilium that runs (a Talos inline manifest or an applied `helm template`) is taken over as Ichor's Helm release unless\n" +
			"--cni-unmanaged keeps it as it is: the plan reads it over the cluster's Kubernetes API (the admin kubeconfig read from a\n" +
			"control plane) and refuses a minor other than the pinned chart's or the one below, an IPAM other than kubernetes, native\n" +
			"routing, an agent not ready on every Node and KubePrism off port 7445; it renders the chart with Ichor's values and lists\n" +
			"every field the takeover would change. Any difference needs --accept-cilium-diff, a change Ichor-owned values decide\n" +
			"--accept-cilium-changes too. After the write the controller's ichor-cni Job installs the release over the running objects\n" +
			"(CNIHandover); the release waits for it. A Cilium installed with Helm as release kube-system/cilium is taken over with its\n" +
			"values (its records kept in ichor-cilium-prior-release); into a cluster with no CNI the write installs Ichor's pinned Cilium\n" +
			"first, as `ichor cni bootstrap` does.\n\n" +
			"adopt --release --cluster NAME lifts the holds one machine at a time, control planes first: each node is checked to be the\n" +
			"machine, its live configuration compared with its render (anything but a B difference or the install target keeps it, and\n" +
			"the machines after it, held), then the controller applies the render and the release waits for the machine to be Ready.\n\n" +
			"adopt --cluster NAME --add-machine ADDRESS registers a configured machine of cluster NAME that no TalosMachine stands for\n" +
			"(it joined with your own tooling after the adoption, or its TalosMachine was deleted): it is read with the cluster's\n" +
			"credentials, must name the cluster's ID and Talos API CA, is compared with its render like an adopted machine and is\n" +
			"written held; `adopt --release` releases it.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: flagPlan, Usage: "show what adoption would do and stop: read-only"},
			&cli.BoolFlag{Name: "release", Usage: "release the adoption's holds of --cluster NAME, one machine at a time"},
			&cli.StringFlag{Name: flagCluster, Usage: "the cluster's `NAME` (with --release or --add-machine)"},
			&cli.StringSliceFlag{Name: flagAddMachine, Usage: "register the configured machine at `ADDRESS` with --cluster NAME, held (repeat it for each)"},
			&cli.StringFlag{Name: flagTalosconfig, Usage: "your talosconfig `FILE` for the cluster (its current context's credentials; read here, sent nowhere)", TakesFile: true},
			&cli.StringSliceFlag{Name: flagNode, Usage: "`ADDRESS` of a machine of the cluster, control planes and workers (repeat it for each)"},
			&cli.IntFlag{Name: flagTalosPort, Usage: usageTalosPort},
			&cli.StringFlag{Name: "secrets-bundle", Usage: "the cluster's secrets bundle `FILE` (what `talosctl gen secrets` wrote)", TakesFile: true},
			&cli.BoolFlag{Name: "recover-secrets", Usage: "rebuild the secrets bundle from a control plane's configuration, read-only (stored encrypted by the write)"},
			&cli.StringFlag{Name: "recover-from", Usage: "the control plane `ADDRESS` --recover-secrets reads (default: the first control plane given)"},
			&cli.StringFlag{Name: "version-contract", Usage: "render with this version `CONTRACT` (v1.12 up to the running version) instead of the probe's choice"},
			&cli.BoolFlag{Name: "cni-unmanaged", Usage: "keep the CNI as it is, Cilium included (spec.cni.preset: unmanaged)"},
			&cli.BoolFlag{Name: flagAcceptCiliumDiff, Usage: "take Cilium over although Ichor's render of it differs from the running objects (the plan lists the fields)"},
			&cli.BoolFlag{Name: flagAcceptCiliumChanges, Usage: "with --accept-cilium-diff, also accept the changes Ichor-owned values make to the running data plane"},
			&cli.StringFlag{Name: flagInstall, Value: initflow.InstallManifest, Usage: "`MODE`: manifest (the installer Job installs Ichor in the cluster) or none (only its CRDs; the controller runs elsewhere)"},
			&cli.StringFlag{Name: flagInstallerImage, Usage: "the installer Job's `IMAGE` (default: this release's, " + install.InstallerRepository + ":<version>)"},
			&cli.StringFlag{Name: flagWriteKubeconfig, Usage: "also write the admin kubeconfig to `FILE` (mode 0600)", TakesFile: true},
			&cli.StringFlag{Name: flagPassphraseFile, Usage: "read the secrets store's passphrase from `FILE` (else $" + secretstore.PassphraseEnv + ", else a prompt)", TakesFile: true},
			&cli.BoolFlag{Name: flagGeneratePassphrase, Usage: "generate the passphrase of a new secrets store and show it once"},
			&cli.DurationFlag{Name: flagTimeout, Value: 15 * time.Minute, Usage: "with --release, how long to wait for each machine to be Ready"},
		},
		Action: adoptAction,
	}
}

func adoptAction(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Present() {
		return fmt.Errorf("`%s` takes no arguments (the machines are --node ADDRESS); run `%s --help`", cmd.FullName(), cmd.FullName())
	}

	if cmd.Bool("release") {
		return adoptRelease(ctx, cmd)
	}

	if cmd.IsSet(flagAddMachine) {
		return adoptAddMachine(ctx, cmd)
	}

	if cmd.IsSet(flagCluster) {
		return errors.New("--cluster names the cluster of --release or --add-machine; the plan and the write take the cluster's name from its configuration")
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

	if !cmd.Bool("cni-unmanaged") {
		if err := adoptflow.CheckTakeover(ctx, p, adoptflow.TakeoverOptions{
			Talosconfig: talosconfig, TalosPort: cmd.Int(flagTalosPort),
			AcceptDiff: cmd.Bool(flagAcceptCiliumDiff), AcceptChanges: cmd.Bool(flagAcceptCiliumChanges),
		}); err != nil {
			return err
		}
	}

	if r.format != output.Table {
		if err := output.Object(r.out, r.format, p); err != nil {
			return err
		}
	} else if err := r.printAdoptionPlan(p, cmd.Bool(flagPlan)); err != nil {
		return err
	}

	if err := refusalError("adopting cluster "+p.Cluster.Name, p.Refusals); err != nil || cmd.Bool(flagPlan) {
		return err
	}

	return r.adoptWrite(ctx, cmd, p, o.Bundle, talosconfig)
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
func (r *run) printAdoptionPlan(p *adopt.Plan, planOnly bool) error {
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

	b.Add("CNI", adoptionCNI(p))
	b.Add("Talos CNI setting", c.TalosCNI)
	b.Add("kube-proxy", map[bool]string{true: "enabled (Talos deploys it)", false: "disabled"}[c.KubeProxy])

	prism := textOff
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

	t := output.Rows{Header: []string{colAddress, "HOSTNAME", colRole, colTalos, "KUBERNETES", "A", "B", "C", colStatus}}
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
		r.printMachineDrift(m)
	}

	r.printf("\nA: representable (stored as patches or spec fields); B: Ichor-owned (the first render changes it; needs consent, does not block); " +
		"C: blocks the machine.\n")

	for _, w := range p.Warnings {
		r.warnf("%s", w)
	}

	r.printTakeover(p.CiliumTakeover)

	if ci := p.CiliumInstall; ci != nil {
		r.printf("\nCilium install: the cluster runs no CNI; the write installs Ichor's pinned Cilium %s in process as Helm release kube-system/cilium "+
			"(for %d Node(s)), waits for every Node to be Ready, and only then installs Ichor and writes the resources\n", ci.Chart, ci.Nodes)
	}

	switch {
	case p.Refused() || !planOnly:
	default:
		r.printf("Nothing was written. To write the adoption (every machine held until `ichor adopt --release`), run the same command without --plan.\n")
	}

	return nil
}

// printTakeover shows the Cilium takeover check: what runs, and each object
// Ichor's release would create or change (the fields, never their values).
func (r *run) printTakeover(t *adopt.Takeover) {
	if t == nil {
		return
	}

	r.printf("\nCilium takeover: Cilium %s runs", orDash(t.Running))

	if t.Chart != "" {
		r.printf(", taken over with the chart %s", t.Chart)
	}

	r.printf("; IPAM %s, tunnel %s, agent ready on %d of %d Nodes", orDash(t.IPAM), orDash(t.Tunnel), t.Ready, t.Nodes)

	if t.InlineManifest != "" {
		r.printf("; the inline manifest %s is removed from the control planes by the first render after the hand-over", t.InlineManifest)
	}

	r.printf("\n")

	if len(t.PriorRelease) > 0 {
		r.printf("  Helm release kube-system/cilium (records %s): kept in %s in the adoption's namespace and deleted from kube-system before the hand-over (never uninstalled)\n",
			strings.Join(t.PriorRelease, ", "), adopt.PriorReleaseSecret)

		if len(t.UserValues) > 0 {
			r.printf("  its newest record's values become spec.cni.cilium.values")
		} else {
			r.printf("  its newest record has no values of the user's")
		}

		if len(t.DroppedOwned) > 0 {
			r.printf(", without the Ichor-owned keys %s (Ichor sets them)", strings.Join(t.DroppedOwned, ", "))
		}

		r.printf("\n")
	}

	for _, d := range t.Differences {
		if d.Missing {
			r.printf("  create  %s (not in the cluster)\n", d.Object)

			continue
		}

		owned := map[string]bool{}
		for _, o := range d.Owned {
			owned[o] = true
		}

		for _, path := range d.Paths {
			mark := ""
			if owned[path] {
				mark = "  (owned: decided by an Ichor-owned value)"
			}

			r.printf("  change  %s: %s%s\n", d.Object, path, mark)
		}
	}

	for _, o := range t.LeftOver {
		r.printf("  keep    %s (in the inline manifest, not in Ichor's chart: left as it is, not part of the release)\n", o)
	}

	if len(t.Differences) == 0 && len(t.Refusals) == 0 {
		r.printf("  Ichor's render matches every running object: the takeover changes nothing and restarts no pod.\n")
	}
}

// printMachineDrift lists m's differences from its render, with the hint of
// a blocked machine.
func (r *run) printMachineDrift(m adopt.MachinePlan) {
	if len(m.Drift) == 0 {
		return
	}

	r.printf("\n%s (%s): differences from what Ichor would render\n", m.Address, m.Role)

	for _, d := range m.Drift {
		r.printf("  %s  %-7s  %s: %s\n", d.Class, d.Op, d.Path, d.Why)
	}

	if m.Hint != "" {
		r.printf("  blocked: %s\n", m.Hint)
	}
}

// adoptionCNI is the CNI line: what runs and what adoption makes of it.
func adoptionCNI(p *adopt.Plan) string {
	c := p.Cluster
	found := "none in the machine configuration"

	switch t := p.CiliumTakeover; {
	case len(c.CNIs) > 0:
	case t != nil && len(t.PriorRelease) > 0:
		return "cilium, installed with Helm (release kube-system/cilium); taken over as Ichor's Cilium (spec.cni.preset: cilium)"
	case t != nil:
		return "cilium, applied without a Helm release (an applied `helm template`); taken over as Ichor's Cilium (spec.cni.preset: cilium)"
	case p.CiliumInstall != nil:
		return "none (none in the machine configuration, no CNI DaemonSet in the cluster); adoption installs Ichor's Cilium (spec.cni.preset: cilium)"
	}

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
