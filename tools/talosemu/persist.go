package talosemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Files in a machine's state directory.
const (
	fileMachine       = "machine.json"
	fileConfig        = "config.yaml"
	fileMaintCert     = "maintenance.crt"
	fileMaintKey      = "maintenance.key"
	stateDirFileMode  = 0o700
	secretFileMode    = 0o600
	nonSecretFileMode = 0o644
)

// persisted is what a machine keeps across restarts of talosemu (besides its config and
// maintenance key, which live in their own 0600 files).
type persisted struct {
	Hardware hwSpec `json:"hardware"`
	// Powered is false after Shutdown, Reset without reboot or a power-off through the control API.
	Powered bool `json:"powered"`
	// Installed is true when Talos is on the system disk.
	Installed bool `json:"installed"`
	// SystemDisk is the device name Talos is installed to.
	SystemDisk string `json:"systemDisk,omitempty"`
	// Version and Schematic are what the machine runs: the installed ones, or the boot media's.
	InstalledVersion   string `json:"installedVersion,omitempty"`
	InstalledSchematic string `json:"installedSchematic,omitempty"`
	// Slot is the A/B boot slot in use ("A" or "B").
	Slot string `json:"slot,omitempty"`
	// PreviousVersion/PreviousSchematic are in the other slot after an upgrade.
	PreviousVersion   string `json:"previousVersion,omitempty"`
	PreviousSchematic string `json:"previousSchematic,omitempty"`
	// Pending is an upgrade written to the other slot that becomes active at the next boot.
	Pending *pendingUpgrade `json:"pending,omitempty"`
	// FailNextUpgrade makes the next boot into a freshly upgraded slot fail, so the machine
	// falls back to the previous slot.
	FailNextUpgrade bool `json:"failNextUpgrade,omitempty"`
	// LastUpgradeFailed records that the last boot fell back to the previous slot.
	LastUpgradeFailed bool `json:"lastUpgradeFailed,omitempty"`
	// BootID is rotated on every boot.
	BootID string `json:"bootID"`
	// Boots counts boots.
	Boots int `json:"boots"`
	// WipeEphemeralAtBoot: the system disk was wiped while the machine ran;
	// its EPHEMERAL data (the etcd member) goes at the next boot.
	WipeEphemeralAtBoot bool `json:"wipeEphemeralAtBoot,omitempty"`
	// Durations override the world's durations when set.
	Durations *Durations `json:"durations,omitempty"`
}

type pendingUpgrade struct {
	Version   string `json:"version"`
	Schematic string `json:"schematic"`
	Image     string `json:"image"`
}

func loadPersisted(dir string) (*persisted, error) {
	b, err := os.ReadFile(filepath.Join(dir, fileMachine))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil //nolint:nilnil // absent is not an error
	}

	if err != nil {
		return nil, err
	}

	var p persisted

	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("state file %s is corrupt: %w", filepath.Join(dir, fileMachine), err)
	}

	return &p, nil
}

func (p *persisted) save(dir string) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}

	return writeFileAtomic(filepath.Join(dir, fileMachine), b, nonSecretFileMode)
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"

	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}

	return os.Rename(tmp, path)
}

func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}

	return b, err
}
