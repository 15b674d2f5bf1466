package plan

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// Apply modes of an impact preview, as people read them. They name what
// reaching the node takes, from Decide's action, mode and reboot.
const (
	// ModeNone: the patch changes nothing on the machine.
	ModeNone = "none"
	// ModeNoReboot: the machine reconciler applies it live.
	ModeNoReboot = "no-reboot"
	// ModeStaged: only install-time fields change; staged until the next install or upgrade.
	ModeStaged = "staged"
	// ModeAPIServerRestart: applied without a reboot, restarting the kube-apiserver; a config rollout does it.
	ModeAPIServerRestart = "kube-apiserver-restart"
	// ModeReboot: a config rollout drains, applies staged and reboots the machine.
	ModeReboot = "reboot"
)

// ModeOf names how a plan reaches its machine.
func ModeOf(p Plan) string {
	switch {
	case p.Action == ActionNone:
		return ModeNone
	case p.Reboot:
		return ModeReboot
	case p.Action == ActionWaitForRollout:
		return ModeAPIServerRestart
	case p.Mode == machineapi.ApplyConfigurationRequest_STAGED:
		return ModeStaged
	default:
		return ModeNoReboot
	}
}

// PatchEdit is a proposed write of one TalosConfigPatch: a create (Old nil),
// an edit, or a delete (New nil).
type PatchEdit struct {
	Old *ichorv1alpha1.TalosConfigPatch
	New *ichorv1alpha1.TalosConfigPatch
}

// Name is the patch's name.
func (e PatchEdit) Name() string {
	if e.New != nil {
		return e.New.Name
	}

	if e.Old != nil {
		return e.Old.Name
	}

	return ""
}

// PreviewInput is what an impact preview reads.
type PreviewInput struct {
	// Base is the render input as render.LoadInput returns it for any
	// machine of the cluster (the cluster, the namespace's patches and
	// TalosStorages), with a secrets bundle. The patches are those before the
	// edit; the machine is replaced by each of Machines.
	Base render.Input
	// Machines are the candidate machines; those of other clusters and
	// those without a role (not approved yet: no configuration) are skipped.
	Machines []ichorv1alpha1.TalosMachine
	// Edit is the proposed write.
	Edit PatchEdit
}

// MachineImpact is what the edit does to one machine.
type MachineImpact struct {
	Machine string `json:"machine"`
	Role    string `json:"role"`
	// Changes are the paths whose value the edit changes (never the values).
	Changes []Change `json:"changes,omitempty"`
	// Mode is how the change reaches the node: none, no-reboot, staged,
	// kube-apiserver-restart or reboot.
	Mode string `json:"mode"`
	// WaitsForRollout says the change waits for a `config` operation
	// (`ichor config apply`): a reboot, or a kube-apiserver restart on a
	// control plane.
	WaitsForRollout bool `json:"waitsForRollout,omitempty"`
	// Errors are why the configuration after the edit cannot be rendered or
	// fails machinery's validation; the controller would refuse to apply it.
	Errors []string `json:"errors,omitempty"`
	// Warnings are machinery's validation warnings after the edit.
	Warnings []string `json:"warnings,omitempty"`
}

// Impact is the impact preview of a patch edit.
type Impact struct {
	// Patch is the name of the edited patch.
	Patch string `json:"patch"`
	// Machines are the machines the patch targets before or after the edit, by name.
	Machines []MachineImpact `json:"machines"`
	// Privileged is what the admission webhook will require of the writer
	// (guard.PatchRequirements): empty for a patch with no privileged configuration.
	Privileged []guard.Requirement `json:"privileged,omitempty"`
}

// Valid reports whether every machine renders and validates after the edit.
func (i Impact) Valid() bool {
	for _, m := range i.Machines {
		if len(m.Errors) > 0 {
			return false
		}
	}

	return true
}

// Preview renders every machine the edited patch targets, before and after
// the edit, and plans the difference with the same Decide the machine
// reconciler uses. The secrets bundle only has to be the same on both sides:
// a synthetic one (ichor-ui's, which holds no CA key) gives the same paths
// and modes, because the edit alone differs.
func Preview(in PreviewInput) (Impact, error) {
	out := Impact{Patch: in.Edit.Name(), Privileged: guard.PatchRequirements(in.Edit.Old, in.Edit.New)}
	if in.Base.Cluster == nil || in.Base.Bundle == nil {
		return out, errors.New("the impact preview needs the cluster and a secrets bundle")
	}

	if in.Edit.Old == nil && in.Edit.New == nil {
		return out, errors.New("the impact preview needs a patch to create, edit or delete")
	}

	after := withEdit(in.Base.Patches, in.Edit)
	c := in.Base.Cluster

	machines := append([]ichorv1alpha1.TalosMachine(nil), in.Machines...)
	sort.Slice(machines, func(i, j int) bool { return machines[i].Name < machines[j].Name })

	for i := range machines {
		m := &machines[i]
		if m.Spec.ClusterName != c.Name || m.Namespace != c.Namespace || m.Spec.Role == "" {
			continue
		}

		hit, err := targetsEither(in.Edit, m)
		if err != nil {
			return out, err
		}

		if !hit {
			continue
		}

		out.Machines = append(out.Machines, previewMachine(in.Base, after, m))
	}

	return out, nil
}

// targetsEither reports whether the patch targets m before or after the edit.
func targetsEither(e PatchEdit, m *ichorv1alpha1.TalosMachine) (bool, error) {
	for _, p := range []*ichorv1alpha1.TalosConfigPatch{e.Old, e.New} {
		if p == nil {
			continue
		}

		ok, err := render.Targets(p, m)
		if err != nil || ok {
			return ok, err
		}
	}

	return false, nil
}

func previewMachine(base render.Input, after []ichorv1alpha1.TalosConfigPatch, m *ichorv1alpha1.TalosMachine) MachineImpact {
	mi := MachineImpact{Machine: m.Name, Role: m.Spec.Role, Mode: ModeNone}

	in := base
	in.Machine = m

	var beforeVals render.Values

	if res, err := render.Render(in); err == nil {
		beforeVals, err = render.DocumentValues(res.Config.Documents())
		if err != nil {
			mi.Errors = append(mi.Errors, fmt.Sprintf("reading the configuration before the change: %v", err))

			return mi
		}
	}
	// A machine that does not render today (another broken patch) is
	// compared with nothing: every value counts as added, and the
	// render after the edit says whether it is fixed.

	in.Patches = after

	res, err := render.Render(in)
	if err != nil {
		mi.Errors = append(mi.Errors, err.Error())

		return mi
	}

	warnings, err := res.Validate()
	mi.Warnings = warnings

	if err != nil {
		mi.Errors = append(mi.Errors, splitErrors(err)...)
	}

	afterVals, err := render.DocumentValues(res.Config.Documents())
	if err != nil {
		mi.Errors = append(mi.Errors, fmt.Sprintf("reading the configuration after the change: %v", err))

		return mi
	}

	p := New(afterVals, beforeVals, m.Spec.Role)
	mi.Changes = p.Changes
	mi.Mode = ModeOf(p)
	mi.WaitsForRollout = p.Action == ActionWaitForRollout

	return mi
}

// splitErrors lists the errors of machinery's multierror one per line, so
// each names its own field.
func splitErrors(err error) []string {
	var out []string

	for line := range strings.SplitSeq(err.Error(), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "*"))
		if line == "" || strings.HasSuffix(line, "errors occurred:") || strings.HasSuffix(line, "error occurred:") {
			continue
		}

		out = append(out, line)
	}

	if len(out) == 0 {
		out = []string{err.Error()}
	}

	return out
}

// withEdit returns the patches with the edit made: the old patch of its name
// dropped, the new one added.
func withEdit(patches []ichorv1alpha1.TalosConfigPatch, e PatchEdit) []ichorv1alpha1.TalosConfigPatch {
	name := e.Name()
	out := make([]ichorv1alpha1.TalosConfigPatch, 0, len(patches)+1)

	for _, p := range patches {
		if p.Name != name {
			out = append(out, p)
		}
	}

	if e.New != nil {
		out = append(out, *e.New)
	}

	return out
}
