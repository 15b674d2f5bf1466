package talosemu

import (
	"slices"
	"time"
)

// ShutdownCall is one MachineService.Shutdown request a machine handled: when,
// and whether it asked to skip the cordon and drain (ShutdownRequest.force).
// Tests read the order of a cluster shutdown from it.
type ShutdownCall struct {
	At    time.Time `json:"at"`
	Force bool      `json:"force"`
}

func (m *Machine) recordShutdown(force bool) {
	m.rpcMu.Lock()
	m.shutdowns = append(m.shutdowns, ShutdownCall{At: time.Now(), Force: force})
	m.rpcMu.Unlock()
}

// ShutdownCalls returns the Shutdown requests the machine handled, oldest first.
func (m *Machine) ShutdownCalls() []ShutdownCall {
	m.rpcMu.Lock()
	defer m.rpcMu.Unlock()

	return slices.Clone(m.shutdowns)
}
