// Package hook is the node-operation hook shared by removal, upgrades and
// reboot-requiring config rollouts (architecture, "Storage"): before a node is
// drained, the storage system evacuates it, and afterwards, when the machine
// stays, scheduling comes back. Longhorn is the hook of the longhorn presets;
// None lets every node go.
package hook

import (
	"context"
	"errors"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Storage evacuates a machine's storage before a disruptive step. done false
// with a message means "not yet": the caller waits and asks again. An error
// that is a *PausedError (IsPaused) means the evacuation reached its timeout:
// the caller pauses with its message and never proceeds to drain.
type Storage interface {
	Evacuate(ctx context.Context, m *ichorv1alpha1.TalosMachine) (done bool, msg string, err error)
}

// Restorer is the optional second half of a Storage hook: after the
// disruptive step, when the machine stays (a reboot, an upgrade), it lets the
// storage system schedule on the node again. Call it through Restore.
type Restorer interface {
	Restore(ctx context.Context, m *ichorv1alpha1.TalosMachine) error
}

// Restore re-enables storage scheduling on m's node when s is a Restorer; a
// hook without the second half has nothing to undo.
func Restore(ctx context.Context, s Storage, m *ichorv1alpha1.TalosMachine) error {
	if r, ok := s.(Restorer); ok {
		return r.Restore(ctx, m)
	}

	return nil
}

// PausedError is the evacuation that reached its timeout with replicas still
// on the node. Its message says which, and how to go on.
type PausedError struct{ Message string }

func (e *PausedError) Error() string { return e.Message }

// IsPaused reports whether err is a *PausedError, and returns it.
func IsPaused(err error) (*PausedError, bool) {
	var p *PausedError

	ok := errors.As(err, &p)

	return p, ok
}

// None is the hook of a cluster without a storage integration.
type None struct{}

// Evacuate lets the node go at once.
func (None) Evacuate(context.Context, *ichorv1alpha1.TalosMachine) (bool, string, error) {
	return true, "", nil
}
