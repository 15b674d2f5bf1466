package adopt

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/api/v1alpha1/config/convert"
	"github.com/maeshinshin/ichor/contracts/pkg/configpatch"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// HoldValue is the value of the hold-apply annotation the write phase puts on
// every TalosMachine it creates; the release lifts only holds of this value
// (a hold a person set is theirs).
const HoldValue = "ichor-adopt"

// PatchPrefix starts the name of the TalosConfigPatch that carries one
// machine's class A documents.
const PatchPrefix = "adopted-"

// Objects are the resources the write phase creates, in the order it creates
// them: the TalosCluster, a TalosConfigPatch per machine with class A
// documents, and the TalosMachines, each held. Blocked machines have none:
// adoption leaves them untouched.
type Objects struct {
	Cluster  *ichorv1alpha1.TalosCluster
	Patches  []*ichorv1alpha1.TalosConfigPatch
	Machines []*ichorv1alpha1.TalosMachine
	// Skipped are the addresses of the blocked machines.
	Skipped []string
}

// Objects works out what the write phase creates in namespace. It refuses a
// plan that was refused, and one with a blocked control plane: every control
// plane must be known for the quorum checks, so the cluster is adopted whole
// or not at all; a blocked worker is left out.
func (p *Plan) Objects(namespace string) (*Objects, error) {
	if p.Refused() {
		return nil, errors.New("the plan is refused: nothing is written")
	}

	if len(p.facts) != len(p.Machines) || p.Cluster.VersionContract == "" {
		return nil, errors.New("the plan compared no machine: nothing is written")
	}

	var blockedCPs []string

	for _, m := range p.Machines {
		if m.Blocked && m.Role == ichorv1alpha1.RoleControlPlane {
			blockedCPs = append(blockedCPs, m.Address)
		}
	}

	if len(blockedCPs) > 0 {
		return nil, fmt.Errorf("control plane(s) %v are blocked (class C drift): a cluster is adopted with every control plane or not at all; "+
			"fix what the plan lists on them, then run `ichor adopt --plan` again", blockedCPs)
	}

	c := p.desiredCluster(p.facts, p.Cluster.VersionContract)
	c.Namespace = namespace

	out := &Objects{Cluster: c}

	for i, mp := range p.Machines {
		if mp.Blocked {
			out.Skipped = append(out.Skipped, mp.Address)

			continue
		}

		tm := heldMachine(c, mp.Machine, p.facts[i])

		docs, err := representable(mp)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", mp.Address, err)
		}

		if len(docs) > 0 {
			out.Patches = append(out.Patches, machinePatch(tm, docs))
		}

		out.Machines = append(out.Machines, tm)
	}

	return out, nil
}

// heldMachine is the TalosMachine the adoption writes for m, in c's
// namespace, held.
func heldMachine(c *ichorv1alpha1.TalosCluster, m Machine, f Facts) *ichorv1alpha1.TalosMachine {
	tm := desiredMachine(c, m, f)
	tm.Namespace = c.Namespace
	tm.Labels = map[string]string{ichorv1alpha1.ClusterLabel: c.Name}
	tm.Annotations = map[string]string{ichorv1alpha1.HoldApplyAnnotation: HoldValue}

	return tm
}

// machinePatch is the machine-layer patch that carries tm's class A documents.
func machinePatch(tm *ichorv1alpha1.TalosMachine, docs []mirror.PatchDocument) *ichorv1alpha1.TalosConfigPatch {
	return &ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: tm.Namespace, Name: PatchPrefix + tm.Name,
			Labels: map[string]string{ichorv1alpha1.ClusterLabel: tm.Spec.ClusterName},
		},
		Spec: ichorv1alpha1.TalosConfigPatchSpec{
			ClusterName: tm.Spec.ClusterName, Layer: ichorv1alpha1.LayerMachine,
			Target: ichorv1alpha1.PatchTarget{MachineName: tm.Name}, Documents: docs,
		},
	}
}

// representable are the live documents behind m's class A drift that a
// TalosConfigPatch may carry, whole, as the node has them (a value the render
// adds and the node lacks has no document to store: it stays drift, which
// the release's live check reports). The install target is in spec fields.
func representable(m MachinePlan) ([]mirror.PatchDocument, error) {
	type key struct{ kind, name string }

	var want []key

	for _, d := range m.Drift {
		if d.Class != ClassRepresentable || d.Op == plan.Added || d.kind == render.LegacyKind || !configpatch.IsAllowed(d.kind) {
			continue
		}

		if k := (key{d.kind, d.name}); !slices.Contains(want, k) {
			want = append(want, k)
		}
	}

	if len(want) == 0 {
		return nil, nil
	}

	cfg, err := ParseConfig(m.Config)
	if err != nil {
		return nil, err
	}

	var out []mirror.PatchDocument

	for _, doc := range cfg.Documents() {
		name := ""
		if nd, ok := doc.(talosconfig.NamedDocument); ok {
			name = nd.Name()
		}

		if !slices.Contains(want, key{doc.Kind(), name}) {
			continue
		}

		pd, err := convert.PatchDocumentFromMachinery(doc)
		if err != nil {
			return nil, fmt.Errorf("document %s: %w", doc.Kind(), err)
		}

		out = append(out, *pd)
	}

	return out, nil
}

// CheckLive is the release's live check of one held machine: the drift
// between the render and the node's configuration, each path classified as
// the plan classifies it. The release lifts the hold only when Unsettled
// finds nothing.
func CheckLive(res *render.Result, live []byte) ([]Drift, error) {
	cfg, err := ParseConfig(live)
	if err != nil {
		return nil, err
	}

	f, err := ReadFacts(cfg)
	if err != nil {
		return nil, err
	}

	var cnis []CNI
	if f.Role == ichorv1alpha1.RoleControlPlane {
		if cnis, err = DetectCNIs([]Facts{f}); err != nil {
			return nil, err
		}
	}

	return Classify(res, live, ciliumInline(cnis), f.InlineManifests)
}

// Unsettled is the drift that keeps a machine held: class C, and class A
// that no spec field or patch carries. Class B is what the first render
// changes, consented to when the adoption was written; the install target is
// in spec.install and spec.talosVersion (the render spells the installer
// image its own way, and Talos reads it only at an install or an upgrade).
func Unsettled(ds []Drift) []Drift {
	var out []Drift

	for _, d := range ds {
		if d.Class == ClassBlocking || (d.Class == ClassRepresentable && d.Why != whyInstall) {
			out = append(out, d)
		}
	}

	return out
}

// Addition is the plan of one configured machine of a cluster Ichor manages
// that no TalosMachine stands for (it joined with the operator's own tooling
// after an adoption, or its TalosMachine was deleted): `ichor adopt
// --add-machine` (architecture, "Machines", reclaim).
type Addition struct {
	MachinePlan
	// Objects holds the held TalosMachine and, with class A documents, its
	// patch; nil while the machine is blocked.
	Objects *Objects `json:"-"`
}

// PlanAddition compares m, read from the node with the cluster's bundle b,
// with the TalosMachine an adoption would write for it into cluster c.
// load gathers the render's input for that machine (render.LoadInput in the
// CLI). It refuses a machine whose own configuration names another cluster
// (its cluster ID or Talos API CA is not c's): it belongs elsewhere.
func PlanAddition(c *ichorv1alpha1.TalosCluster, b *secrets.Bundle, m Machine, load func(*ichorv1alpha1.TalosMachine) (render.Input, error)) (*Addition, error) {
	cfg, err := ParseConfig(m.Config)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Address, err)
	}

	f, err := ReadFacts(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Address, err)
	}

	var ca []byte
	if sec := cfg.Machine().Security(); sec != nil && sec.IssuingCA() != nil {
		ca = sec.IssuingCA().Crt
	}

	if f.ClusterID != b.Cluster.ID || b.Certs == nil || b.Certs.OS == nil || !bytes.Equal(ca, b.Certs.OS.Crt) {
		return nil, fmt.Errorf("the machine at %s is configured for another cluster than %s (its cluster ID or Talos API CA is not this cluster's): "+
			"it is not added; give the address of a machine of cluster %s", m.Address, c.Name, c.Name)
	}

	tm := heldMachine(c, m, f)

	in, err := load(tm)
	if err != nil {
		return nil, err
	}

	in.Machine, in.Bundle = tm, b

	res, err := render.Render(in)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", m.Address, err)
	}

	drift, err := CheckLive(res, m.Config)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Address, err)
	}

	a := &Addition{MachinePlan: MachinePlan{
		Machine: m, Role: f.Role, KubernetesVersion: f.KubernetesVersion, InstallDisk: f.InstallDisk, Drift: drift,
	}}

	if Count(drift, ClassBlocking) > 0 {
		a.Blocked, a.Hint = true, hintBlocked

		return a, nil
	}

	docs, err := representable(a.MachinePlan)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Address, err)
	}

	a.Objects = &Objects{Machines: []*ichorv1alpha1.TalosMachine{tm}}

	if len(docs) > 0 {
		a.Objects.Patches = []*ichorv1alpha1.TalosConfigPatch{machinePatch(tm, docs)}
	}

	return a, nil
}
