// Package hook is the node-operation hook shared by removal, upgrades and
// reboot-requiring config rollouts (architecture, "Storage"): before a node is
// drained, the storage system evacuates it. The storage integration fills it
// in; until then None lets every node go.
package hook

import (
	"context"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Storage evacuates a machine's storage before a disruptive step. done false
// with a message means "not yet": the caller waits and asks again.
type Storage interface {
	Evacuate(ctx context.Context, m *ichorv1alpha1.TalosMachine) (done bool, msg string, err error)
}

// None is the hook of a cluster without a storage integration.
type None struct{}

// Evacuate lets the node go at once.
func (None) Evacuate(context.Context, *ichorv1alpha1.TalosMachine) (bool, string, error) {
	return true, "", nil
}
