package adopt

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cni"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// Options are the person's choices.
type Options struct {
	// Bundle is the cluster's secrets bundle (--secrets-bundle, or recovered
	// from a control plane's configuration).
	Bundle *secrets.Bundle
	// VersionContract overrides the probe (--version-contract).
	VersionContract string
	// CNIUnmanaged keeps a CNI other than Cilium (--cni-unmanaged).
	CNIUnmanaged bool
	// EtcdMembers are the etcd members' hostnames as a control plane lists
	// them; nil when they were not read (the plan then warns).
	EtcdMembers []string
}

// ContractScore is one probed version contract.
type ContractScore struct {
	Contract string `json:"contract"`
	// Unrepresentable is the number of class C paths over every machine.
	Unrepresentable int `json:"unrepresentable"`
	// Error is why the contract could not be rendered.
	Error string `json:"error,omitempty"`
}

// ClusterPlan is what the plan found about the cluster.
type ClusterPlan struct {
	Name     string `json:"name"`
	ID       string `json:"id,omitempty"`
	Endpoint string `json:"endpoint"`
	// TalosVersion and KubernetesVersion are what the cluster runs.
	TalosVersion      string `json:"talosVersion"`
	KubernetesVersion string `json:"kubernetesVersion"`
	// VersionContract is the contract adoption would render with; ContractSource
	// says whether the probe chose it or --version-contract; Probe lists the scores.
	VersionContract string          `json:"versionContract,omitempty"`
	ContractSource  string          `json:"contractSource,omitempty"`
	Probe           []ContractScore `json:"probe,omitempty"`
	// CNIs are the CNIs found; CNIPreset is spec.cni.preset adoption would
	// write (cilium or unmanaged) and TalosCNI Talos's own CNI setting.
	CNIs      []CNI  `json:"cnis"`
	CNIPreset string `json:"cniPreset,omitempty"`
	TalosCNI  string `json:"talosCNI"`
	// KubeProxy is true when Talos deploys kube-proxy; KubePrismPort is zero when KubePrism is off.
	KubeProxy     bool `json:"kubeProxy"`
	KubePrismPort int  `json:"kubePrismPort"`
	// InlineManifests are the inline manifest entries, ExtraManifests the extra manifest URLs.
	InlineManifests []InlineManifestPlan `json:"inlineManifests,omitempty"`
	ExtraManifests  []string             `json:"extraManifests,omitempty"`
	// PodSubnets, ServiceSubnets and DNSDomain are the cluster network.
	PodSubnets     []string `json:"podSubnets,omitempty"`
	ServiceSubnets []string `json:"serviceSubnets,omitempty"`
	DNSDomain      string   `json:"dnsDomain,omitempty"`
	// Schedulable is whether control planes take workloads.
	Schedulable bool `json:"schedulable"`
}

// InlineManifestPlan is one inline manifest entry.
type InlineManifestPlan struct {
	Name    string   `json:"name"`
	Objects []string `json:"objects"`
	CNI     string   `json:"cni,omitempty"`
}

// MachinePlan is what the plan found about one machine.
type MachinePlan struct {
	Machine
	Role              string `json:"role"`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	InstallDisk       string `json:"installDisk,omitempty"`
	// Drift is every difference with the render, class A, B and C.
	Drift []Drift `json:"drift"`
	// Blocked is true with class C drift (or a render error): adoption leaves
	// the machine untouched. Hint says what to do.
	Blocked bool   `json:"blocked"`
	Hint    string `json:"hint,omitempty"`
}

// Plan is the read-only plan of an adoption.
type Plan struct {
	Cluster  ClusterPlan     `json:"cluster"`
	Machines []MachinePlan   `json:"machines"`
	Warnings []string        `json:"warnings,omitempty"`
	Refusals []guard.Refusal `json:"refusals,omitempty"`
	// CiliumTakeover is the check of the running Cilium the adoption takes
	// over (AddTakeover); nil when none was made.
	CiliumTakeover *Takeover `json:"ciliumTakeover,omitempty"`
	// CiliumInstall is the install of Ichor's Cilium into a cluster with no
	// CNI (AddInstall); nil when the cluster runs one.
	CiliumInstall *CiliumInstall `json:"ciliumInstall,omitempty"`

	// facts are each machine's facts, in the order of Machines.
	facts []Facts
}

// Refused reports whether adoption is refused.
func (p *Plan) Refused() bool { return len(p.Refusals) > 0 }

// hintBlocked is the hint of a machine with class C drift.
const hintBlocked = "adoption leaves this machine untouched: make its configuration match what Ichor renders " +
	"(remove or change the listed values with talosctl patch machineconfig) or give the right secrets bundle, then run `ichor adopt --plan` again"

// Build makes the plan from what was read. It writes nothing and sends nothing.
func Build(machines []Machine, o Options) (*Plan, error) {
	if len(machines) == 0 {
		return nil, errors.New("no machine to adopt")
	}

	p := &Plan{}

	facts := make([]Facts, len(machines))

	running := map[string]string{}

	for i, m := range machines {
		cfg, err := ParseConfig(m.Config)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Address, err)
		}

		if facts[i], err = ReadFacts(cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Address, err)
		}

		running[m.Address] = m.TalosVersion

		p.Machines = append(p.Machines, MachinePlan{
			Machine: m, Role: facts[i].Role, KubernetesVersion: facts[i].KubernetesVersion, InstallDisk: facts[i].InstallDisk,
		})
	}

	var cps []Facts

	first := -1

	for i, f := range facts {
		if f.Role == ichorv1alpha1.RoleControlPlane {
			cps = append(cps, f)

			if first < 0 {
				first = i
			}
		}
	}

	if first < 0 {
		return nil, errors.New("none of the machines is a control plane: give the control planes' addresses too")
	}

	cf := facts[first]
	p.Cluster = ClusterPlan{
		Name: cf.ClusterName, ID: cf.ClusterID, TalosVersion: machines[first].TalosVersion, KubernetesVersion: cf.KubernetesVersion,
		TalosCNI: cf.TalosCNI, KubeProxy: cf.KubeProxy, KubePrismPort: cf.KubePrismPort, ExtraManifests: cf.ExtraManifests,
		PodSubnets: cf.PodSubnets, ServiceSubnets: cf.ServiceSubnets, DNSDomain: cf.DNSDomain, Schedulable: cf.Schedulable,
	}

	if cf.Endpoint != nil {
		p.Cluster.Endpoint = cf.Endpoint.String()
	}

	for _, m := range cf.InlineManifests {
		mc, err := ReadManifest(m.Contents)
		if err != nil {
			return nil, fmt.Errorf("inline manifest %s: %w", m.Name, err)
		}

		p.Cluster.InlineManifests = append(p.Cluster.InlineManifests, InlineManifestPlan{Name: m.Name, Objects: mc.Objects, CNI: mc.CNI})
	}

	cnis, err := DetectCNIs(cps)
	if err != nil {
		return nil, err
	}

	p.Cluster.CNIs = cnis

	p.Refusals = append(p.Refusals, CheckVersions(running)...)
	p.Refusals = append(p.Refusals, checkSameCluster(machines, facts)...)

	if o.EtcdMembers == nil {
		p.Warnings = append(p.Warnings, "the etcd members were not read: make sure every control plane of the cluster is given")
	} else {
		var cpNames []string

		for i, f := range facts {
			if f.Role == ichorv1alpha1.RoleControlPlane {
				cpNames = append(cpNames, machines[i].Hostname)
			}
		}

		p.Refusals = append(p.Refusals, CheckMembers(cpNames, o.EtcdMembers)...)
	}

	preset, refusals := CheckCNI(cnis, o.CNIUnmanaged)
	p.Refusals = append(p.Refusals, refusals...)
	p.Cluster.CNIPreset = preset

	if p.Refused() {
		// A version adoption does not take cannot be rendered faithfully;
		// a CNI refusal stops here too, before any work on the drift.
		return p, nil
	}

	if err := release.CheckPair(p.Cluster.TalosVersion, p.Cluster.KubernetesVersion); err != nil {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%v: adopted as it runs; upgrade Kubernetes or Talos afterwards", err))
	}

	if o.Bundle == nil {
		return nil, errors.New("no secrets bundle: give --secrets-bundle FILE or --recover-secrets")
	}

	candidates, err := ContractCandidates(p.Cluster.TalosVersion)
	if err != nil {
		return nil, err
	}

	p.Cluster.ContractSource = "probe"

	if o.VersionContract != "" {
		if !slices.Contains(candidates, o.VersionContract) {
			return nil, fmt.Errorf("--version-contract %s: the cluster runs Talos %s, so the contract is one of %s", o.VersionContract, p.Cluster.TalosVersion, strings.Join(candidates, ", "))
		}

		candidates = []string{o.VersionContract}
		p.Cluster.ContractSource = "flag"
	}

	best := -1

	var bestDrift [][]Drift

	for _, vc := range candidates {
		drift, score := p.probe(machines, facts, vc, o.Bundle)
		p.Cluster.Probe = append(p.Cluster.Probe, score)

		if score.Error == "" && (best < 0 || score.Unrepresentable < p.Cluster.Probe[best].Unrepresentable) {
			best = len(p.Cluster.Probe) - 1
			bestDrift = drift
		}
	}

	if best < 0 {
		return nil, fmt.Errorf("no version contract renders this cluster: %s", p.Cluster.Probe[0].Error)
	}

	p.Cluster.VersionContract = p.Cluster.Probe[best].Contract

	for i := range p.Machines {
		p.Machines[i].Drift = bestDrift[i]
		if Count(bestDrift[i], ClassBlocking) > 0 {
			p.Machines[i].Blocked = true
			p.Machines[i].Hint = hintBlocked
		}
	}

	p.facts = facts

	return p, nil
}

// AddTakeover records the check of the running Cilium the adoption takes
// over; its refusals are the plan's.
func (p *Plan) AddTakeover(t *Takeover) {
	p.CiliumTakeover = t
	p.Refusals = append(p.Refusals, t.Refusals...)
}

// AddInstall records the install of Ichor's Cilium into a cluster with no
// CNI; its refusals are the plan's.
func (p *Plan) AddInstall(ci *CiliumInstall) {
	p.CiliumInstall = ci
	p.Refusals = append(p.Refusals, ci.Refusals...)
}

// CiliumInline is the inline manifest entry that installs Cilium and its
// objects ("Kind namespace/name"); "" when none does.
func (p *Plan) CiliumInline() (string, []string) {
	for _, c := range p.Cluster.CNIs {
		if c.Name != cni.DetectedCilium || c.Source != SourceInlineManifest {
			continue
		}

		for _, m := range p.Cluster.InlineManifests {
			if m.Name == c.InlineManifest {
				return m.Name, m.Objects
			}
		}
	}

	return "", nil
}

// KubePrisms is each machine's KubePrism by address: its port (zero: off)
// and its health as the node reports it.
func (p *Plan) KubePrisms() map[string]KubePrism {
	out := map[string]KubePrism{}

	for i, f := range p.facts {
		out[p.Machines[i].Address] = KubePrism{Port: f.KubePrismPort, Healthy: p.Machines[i].KubePrismHealthy}
	}

	return out
}

// probe renders every machine under contract vc and classifies its drift.
func (p *Plan) probe(machines []Machine, facts []Facts, vc string, b *secrets.Bundle) ([][]Drift, ContractScore) {
	score := ContractScore{Contract: vc}

	c := p.desiredCluster(facts, vc)
	cilium := ciliumInline(p.Cluster.CNIs)
	out := make([][]Drift, len(machines))

	for i, m := range machines {
		tm := desiredMachine(c, m, facts[i])

		res, err := render.Render(render.Input{Cluster: c, Machine: tm, Bundle: b})
		if err != nil {
			score.Error = fmt.Sprintf("%s: %v", m.Address, err)

			return nil, score
		}

		d, err := Classify(res, m.Config, cilium, facts[i].InlineManifests)
		if err != nil {
			score.Error = fmt.Sprintf("%s: %v", m.Address, err)

			return nil, score
		}

		out[i] = d
		score.Unrepresentable += Count(d, ClassBlocking)
	}

	return out, score
}

// desiredCluster is the TalosCluster adoption would write, from the first
// control plane's facts.
func (p *Plan) desiredCluster(facts []Facts, vc string) *ichorv1alpha1.TalosCluster {
	cps := int32(0)

	for _, f := range facts {
		if f.Role == ichorv1alpha1.RoleControlPlane {
			cps++
		}
	}

	c := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Name: p.Cluster.Name, Annotations: map[string]string{ichorv1alpha1.AdoptedAnnotation: "true"}},
		Spec: ichorv1alpha1.TalosClusterSpec{
			TalosVersion:      p.Cluster.TalosVersion,
			VersionContract:   vc,
			KubernetesVersion: p.Cluster.KubernetesVersion,
			SecretsBundleRef:  ichorv1alpha1.SecretReference{Name: p.Cluster.Name + "-secrets"},
			ControlPlane:      ichorv1alpha1.ControlPlaneTopology{Count: cps, Schedulable: new(p.Cluster.Schedulable)},
			Network: ichorv1alpha1.ClusterNetwork{
				PodSubnets: p.Cluster.PodSubnets, ServiceSubnets: p.Cluster.ServiceSubnets, DNSDomain: p.Cluster.DNSDomain,
			},
		},
	}

	if u, err := parseEndpoint(p.Cluster.Endpoint); err == nil {
		c.Spec.Endpoint = u
	}

	kubeProxy := ichorv1alpha1.KubeProxyEnabled
	if !p.Cluster.KubeProxy {
		kubeProxy = ichorv1alpha1.KubeProxyReplaced
	}

	switch p.Cluster.CNIPreset {
	case ichorv1alpha1.CNIPresetUnmanaged:
		talosCNI := "default"
		if p.Cluster.TalosCNI == TalosCNINone {
			talosCNI = TalosCNINone
		}

		c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetUnmanaged, Unmanaged: &ichorv1alpha1.UnmanagedCNISpec{TalosCNI: talosCNI}}
	default:
		c.Spec.CNI = ichorv1alpha1.CNISpec{Preset: ichorv1alpha1.CNIPresetCilium, KubeProxy: kubeProxy}

		// The Cilium adoption installs is Ichor's release from the start:
		// the hand-over controller finds it applied and keeps its values.
		if p.CiliumInstall != nil {
			c.Annotations[ichorv1alpha1.CNIBootstrapAnnotation] = ichorv1alpha1.CNIBootstrapTakeover
		}

		if t := p.CiliumTakeover; t != nil {
			c.Spec.CNI.Tunnel = t.Tunnel
			c.Annotations[ichorv1alpha1.CNIBootstrapAnnotation] = ichorv1alpha1.CNIBootstrapTakeover
			c.Status.CNI.TakenOverInlineManifest = t.InlineManifest

			if len(t.UserValues) > 0 {
				if raw, err := json.Marshal(t.UserValues); err == nil {
					c.Spec.CNI.Cilium = &ichorv1alpha1.CiliumSpec{Values: &runtime.RawExtension{Raw: raw}}
				}
			}
		}
	}

	return c
}

// desiredMachine is the TalosMachine adoption would write for m.
func desiredMachine(c *ichorv1alpha1.TalosCluster, m Machine, f Facts) *ichorv1alpha1.TalosMachine {
	tm := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Name: machineName(m)},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: c.Name,
			Identity:    ichorv1alpha1.MachineIdentity{UUID: m.UUID},
			Address:     m.Address,
			Role:        f.Role,
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved},
		},
	}

	if f.InstallDisk != "" {
		tm.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{DevicePath: f.InstallDisk}
	}

	return tm
}

// machineName is the TalosMachine name adoption would give m: its hostname,
// else its address.
func machineName(m Machine) string {
	if m.Hostname != "" {
		return strings.ToLower(m.Hostname)
	}

	return "machine-" + strings.NewReplacer(".", "-", ":", "-").Replace(m.Address)
}

func parseEndpoint(s string) (ichorv1alpha1.ClusterEndpoint, error) {
	rest, ok := strings.CutPrefix(s, "https://")
	if !ok {
		return ichorv1alpha1.ClusterEndpoint{}, fmt.Errorf("endpoint %q is not https", s)
	}

	host, port, err := net.SplitHostPort(strings.TrimSuffix(rest, "/"))
	if err != nil {
		return ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: rest}, nil //nolint:nilerr // no port: the default
	}

	n, err := strconv.Atoi(port)
	if err != nil {
		return ichorv1alpha1.ClusterEndpoint{}, err
	}

	return ichorv1alpha1.ClusterEndpoint{Type: ichorv1alpha1.EndpointTypeVIP, Host: host, Port: int32(n)}, nil //nolint:gosec // a port
}

// checkSameCluster refuses machines of more than one cluster.
func checkSameCluster(machines []Machine, facts []Facts) []guard.Refusal {
	ids := map[string][]string{}

	for i, f := range facts {
		key := f.ClusterName + " (id " + f.ClusterID + ")"
		ids[key] = append(ids[key], machines[i].Address)
	}

	if len(ids) < 2 {
		return nil
	}

	parts := make([]string, 0, len(ids))
	for _, k := range sortedKeys(ids) {
		parts = append(parts, fmt.Sprintf("%s: %s", k, strings.Join(ids[k], ", ")))
	}

	return []guard.Refusal{{
		Field:  "nodes",
		Rule:   "the nodes belong to different clusters (" + strings.Join(parts, "; ") + ")",
		WayOut: "give the addresses of one cluster's machines",
	}}
}

// CheckCNI decides the CNI preset adoption would write, or refuses: two
// CNIs (even with --cni-unmanaged), a Cilium whose IPAM is not kubernetes,
// another CNI without --cni-unmanaged, and --cni-unmanaged on a cluster
// without a CNI (adopt installs Cilium there).
func CheckCNI(cnis []CNI, unmanaged bool) (string, []guard.Refusal) {
	const field = "cni"

	switch {
	case len(cnis) > 1:
		return "", []guard.Refusal{{
			Field:  field,
			Rule:   "the cluster runs two CNIs: " + names(cnis),
			WayOut: "remove one of them first (Ichor adopts a cluster with one CNI, or none), then run `ichor adopt --plan` again",
		}}
	case len(cnis) == 0 && unmanaged:
		return "", []guard.Refusal{{
			Field:  field,
			Rule:   "--cni-unmanaged keeps a CNI the cluster runs, and this one runs none: adoption installs Ichor's Cilium here",
			WayOut: "run without --cni-unmanaged",
		}}
	case len(cnis) == 0:
		return ichorv1alpha1.CNIPresetCilium, nil
	}

	c := cnis[0]

	if c.Name == cni.DetectedCilium {
		if c.IPAM != CiliumIPAMKubernetes {
			return "", []guard.Refusal{{
				Field: field,
				Rule: fmt.Sprintf("Cilium runs with IPAM %q (%s); Ichor takes over only a Cilium with ipam.mode %q, and never changes the IPAM of a running data plane",
					c.IPAM, c, CiliumIPAMKubernetes),
				WayOut: "move the cluster to Cilium's kubernetes IPAM mode first, then run `ichor adopt --plan` again",
			}}
		}

		if unmanaged {
			return ichorv1alpha1.CNIPresetUnmanaged, nil
		}

		return ichorv1alpha1.CNIPresetCilium, nil
	}

	if !unmanaged {
		return "", []guard.Refusal{{
			Field:  field,
			Rule:   "the cluster runs " + c.String() + ", not Cilium; Ichor manages only Cilium and never migrates a CNI",
			WayOut: "add --cni-unmanaged to adopt the cluster with its CNI left as it is (spec.cni.preset: unmanaged)",
		}}
	}

	return ichorv1alpha1.CNIPresetUnmanaged, nil
}

// CheckMembers refuses a plan that leaves out a control plane: every etcd
// member (by hostname, as etcd lists it) must be one of the control planes
// given. Adoption takes a cluster whole: a control plane Ichor does not know
// would be counted in no quorum check.
func CheckMembers(controlPlanes, etcdMembers []string) []guard.Refusal {
	short := func(h string) string {
		h, _, _ = strings.Cut(strings.ToLower(h), ".")

		return h
	}

	given := map[string]bool{}
	for _, h := range controlPlanes {
		given[short(h)] = true
	}

	var missing []string

	for _, m := range etcdMembers {
		if !given[short(m)] {
			missing = append(missing, m)
		}
	}

	if len(missing) == 0 {
		return nil
	}

	slices.Sort(missing)

	return []guard.Refusal{{
		Field:  "nodes",
		Rule:   fmt.Sprintf("etcd has members that are not among the nodes given: %s; adoption takes every control plane of the cluster", strings.Join(missing, ", ")),
		WayOut: "give their addresses with --node too",
	}}
}
