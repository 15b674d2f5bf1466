// Package plan compares a rendered configuration with the one a node runs,
// classifies each difference with the field metadata table
// (contracts/pkg/configmeta), and decides how the change reaches the node.
//
// Talos does not decide for us: since v1.14 an AUTO apply is a hard-coded
// alias for NO_REBOOT and never inspects the change (Talos
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go,
// ApplyConfiguration; commit 995bc30d5 removed the reboot path), and REBOOT
// is deprecated and refused on a configured node. So Ichor decides, by the
// most disruptive class among the changes:
//
//	class (highest)    control plane                         worker
//	(no change)        ActionNone on either role
//	NoReboot           ActionApply, NO_REBOOT                ActionApply, NO_REBOOT
//	InstallOnly        ActionApply, STAGED (1)               ActionApply, STAGED (1)
//	APIServerRestart   ActionWaitForRollout, NO_REBOOT (2)   ActionApply, NO_REBOOT (3)
//	RebootRequired     ActionWaitForRollout, STAGED+reboot (4)
//
//	(1) Only install-time fields changed: nothing takes effect until the
//	    next install or upgrade, so the configuration is staged (persisted,
//	    not applied live). With NoReboot changes beside them the apply is
//	    NO_REBOOT, which persists them too.
//	(2) The machine reconciler never applies a kube-apiserver restart to a
//	    control plane: a config operation does, one control plane at a time,
//	    waiting for /readyz in between.
//	(3) A worker runs no kube-apiserver; the fields restart nothing there.
//	(4) The machine reports RebootRequired with the paths; a config operation
//	    takes the cluster lock, drains the node, applies STAGED (the new
//	    configuration is what the next boot reads) and reboots it.
//
// Changes carry paths, never values: a node's configuration holds secrets.
package plan

import (
	"bytes"
	"reflect"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/configmeta"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// Class is how disruptive a change is. The order is the constants' order.
type Class int

// Classes, least disruptive first.
const (
	// NoReboot: Talos applies the change live.
	NoReboot Class = iota
	// InstallOnly: the field is read at install or upgrade; nothing changes until then.
	InstallOnly
	// APIServerRestart: applied live, but it restarts kube-apiserver on a control plane.
	APIServerRestart
	// RebootRequired: the change takes effect only after a reboot (also every unknown path).
	RebootRequired
)

func (c Class) String() string {
	switch c {
	case NoReboot:
		return "NoReboot"
	case InstallOnly:
		return "InstallOnly"
	case APIServerRestart:
		return "APIServerRestart"
	case RebootRequired:
		return "RebootRequired"
	default:
		return "Unknown"
	}
}

// Op is what happened to a value.
type Op string

// Ops.
const (
	Added   Op = "added"
	Removed Op = "removed"
	Changed Op = "changed"
)

// Change is one differing value, without the value.
type Change struct {
	Path  render.Path `json:"path"`
	Op    Op          `json:"op"`
	Class Class       `json:"class"`
}

// Classify looks a path up in the field metadata table. A field read at
// install time is InstallOnly even where the table also marks it as needing a
// reboot: no reboot makes it take effect, only an install or an upgrade.
func Classify(p render.Path) Class {
	m := configmeta.Lookup(p.MetaPath())

	switch {
	case m.InstallTimeOnly:
		return InstallOnly
	case m.RebootRequired:
		return RebootRequired
	case m.APIServerRestart:
		return APIServerRestart
	default:
		return NoReboot
	}
}

// Diff lists the values that differ between the desired (rendered) and the
// current (node) configuration, classified, in path order.
func Diff(desired, current render.Values) []Change {
	var out []Change

	for p, d := range desired {
		c, ok := current[p]

		switch {
		case !ok:
			out = append(out, Change{Path: p, Op: Added, Class: Classify(p)})
		case !reflect.DeepEqual(c, d):
			out = append(out, Change{Path: p, Op: Changed, Class: Classify(p)})
		}
	}

	for p := range current {
		if _, ok := desired[p]; !ok {
			out = append(out, Change{Path: p, Op: Removed, Class: Classify(p)})
		}
	}

	paths := make([]render.Path, len(out))
	idx := make(map[render.Path]Change, len(out))

	for i, c := range out {
		paths[i] = c.Path
		idx[c.Path] = c
	}

	render.SortPaths(paths)

	for i, p := range paths {
		out[i] = idx[p]
	}

	return out
}

// Action is what the machine reconciler does with a plan.
type Action string

// Actions.
const (
	// ActionNone: the node runs the desired configuration.
	ActionNone Action = "None"
	// ActionApply: the machine reconciler applies now, in Plan.Mode.
	ActionApply Action = "Apply"
	// ActionWaitForRollout: a config operation rolls the change out; the
	// machine reports RebootRequired or APIServerRestartRequired with the paths.
	ActionWaitForRollout Action = "WaitForRollout"
)

// Plan is the decision for one machine.
type Plan struct {
	// Changes are the differing values.
	Changes []Change
	// Class is the most disruptive class among the changes that matter on this role.
	Class Class
	// Action is what to do.
	Action Action
	// Mode is the apply mode: of the apply now (ActionApply), or of the
	// rollout's apply (ActionWaitForRollout).
	Mode machineapi.ApplyConfigurationRequest_Mode
	// Reboot says the rollout reboots the node after applying.
	Reboot bool
}

// New plans the change from current to desired on a machine of the role.
func New(desired, current render.Values, role string) Plan {
	return Decide(Diff(desired, current), role)
}

// FromBytes plans from configuration bytes (the render's, the node's),
// loaded with machinery's configloader.
//
// The same bytes are the same configuration: no change, and nothing is
// decoded (a machine in sync, at every look, since the node keeps the bytes
// it was sent; talos.Node.Config).
func FromBytes(desired, current []byte, role string) (Plan, error) {
	if bytes.Equal(desired, current) {
		return Decide(nil, role), nil
	}

	d, err := render.ConfigValues(desired)
	if err != nil {
		return Plan{}, err
	}

	c, err := render.ConfigValues(current)
	if err != nil {
		return Plan{}, err
	}

	return New(d, c, role), nil
}

// Decide applies the table of the package documentation.
func Decide(changes []Change, role string) Plan {
	p := Plan{Changes: changes, Action: ActionNone, Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}
	if len(changes) == 0 {
		return p
	}

	cp := role == ichorv1alpha1.RoleControlPlane
	highest := NoReboot

	for _, c := range changes {
		cl := c.Class
		if cl == APIServerRestart && !cp {
			cl = NoReboot
		}

		if cl > highest {
			highest = cl
		}
	}

	p.Class = highest

	switch highest {
	case NoReboot:
		p.Action = ActionApply
	case InstallOnly:
		p.Action = ActionApply
		if onlyInstallOnly(changes) {
			p.Mode = machineapi.ApplyConfigurationRequest_STAGED
		}
	case APIServerRestart:
		p.Action = ActionWaitForRollout
	case RebootRequired:
		p.Action = ActionWaitForRollout
		p.Mode = machineapi.ApplyConfigurationRequest_STAGED
		p.Reboot = true
	}

	return p
}

func onlyInstallOnly(changes []Change) bool {
	for _, c := range changes {
		if c.Class != InstallOnly {
			return false
		}
	}

	return true
}

// Paths are the paths of the changes of a class, as status records them
// (rebootRequiredPaths, driftPaths).
func (p Plan) Paths(c Class) []string {
	var out []string

	for _, ch := range p.Changes {
		if ch.Class == c {
			out = append(out, ch.Path.String())
		}
	}

	return out
}

// AllPaths are the paths of every change.
func (p Plan) AllPaths() []string {
	out := make([]string, 0, len(p.Changes))
	for _, ch := range p.Changes {
		out = append(out, ch.Path.String())
	}

	return out
}

// MarshalText writes a class by its name (NoReboot, …) in JSON and YAML.
func (c Class) MarshalText() ([]byte, error) {
	return []byte(c.String()), nil
}
