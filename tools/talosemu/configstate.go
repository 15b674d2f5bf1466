package talosemu

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/block/blockhelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// setActive makes cfg the running config (Talos's SetConfig) and refreshes what derives from it.
func (m *Machine) setActive(cfg talosconfig.Provider) error {
	m.mu.Lock()
	m.active = cfg
	m.apiCert = nil

	if cfg != nil && cfg.Machine() != nil {
		if err := m.refreshAPICertLocked(); err != nil {
			m.world.logf("machine %s: API certificate: %v", m.Name(), err)
		}
	}

	hostname := m.hostnameLocked()
	persistent := m.persistentCfg
	m.mu.Unlock()

	ctx := context.Background()

	if err := setConfigResources(ctx, m.st, cfg, persistent, hostname); err != nil {
		return err
	}

	if err := m.setNetworkStatus(ctx); err != nil {
		return err
	}

	if err := setHostname(ctx, m.st, hostname); err != nil {
		return err
	}

	return m.refreshDerived(ctx)
}

// setPersistent writes cfg to the STATE partition (Talos's SetPersistedConfig).
func (m *Machine) setPersistent(cfg talosconfig.Provider) error {
	b, err := cfg.Bytes()
	if err != nil {
		return err
	}

	m.mu.Lock()
	defer m.mu.Unlock()

	if err := writeFileAtomic(filepath.Join(m.dir, fileConfig), b, secretFileMode); err != nil {
		return err
	}

	m.persistentCfg = cfg

	return replaceConfig(context.Background(), m.st, "persistent", cfg)
}

// scheduleRollback reverts the running config to the persisted one after timeout, unless an
// apply in another mode cancels it first (t:…/v1alpha1_server.go, TRY mode).
func (m *Machine) scheduleRollback(timeout time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.rollback != nil {
		m.rollback.Stop()
	}

	var t *time.Timer

	t = time.AfterFunc(timeout, func() {
		m.mu.Lock()
		if m.rollback != t || m.closed {
			m.mu.Unlock()

			return
		}

		m.rollback = nil
		persistent := m.persistentCfg
		m.mu.Unlock()

		if err := m.setActive(persistent); err != nil {
			m.world.logf("machine %s: rollback: %v", m.Name(), err)
		}
	})
	m.rollback = t
}

func (m *Machine) cancelRollback() {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.rollback != nil {
		m.rollback.Stop()
		m.rollback = nil
	}
}

// leaveMaintenance runs what follows the first complete config in maintenance: the API restarts
// in configured mode (the maintenance connection drops), then an uninstalled machine installs
// and reboots, while an installed one (STATE was reset) goes on booting.
func (m *Machine) leaveMaintenance() {
	m.sequence(func(ctx context.Context) {
		m.mu.Lock()
		stop := m.detachAPILocked()
		m.mu.Unlock()

		stop()

		m.mu.Lock()
		err := m.startAPILocked()
		installed := m.p.Installed
		m.mu.Unlock()

		if err != nil {
			m.world.logf("machine %s: %v", m.Name(), err)

			return
		}

		if installed {
			m.setStage(runtime.MachineStageBooting, false)

			if sleepCtx(ctx, m.durations().Boot.D()) {
				m.setStage(runtime.MachineStageRunning, true)
			}

			return
		}

		m.install(ctx)
	})
}

// install runs the installing stage, records Talos on the system disk and reboots into it.
func (m *Machine) install(ctx context.Context) {
	m.publishSequence("install", machineapi.SequenceEvent_START, "")
	m.setStage(runtime.MachineStageInstalling, false)

	if !sleepCtx(ctx, m.durations().Install.D()) {
		return
	}

	m.mu.Lock()
	m.p.Installed = true
	m.p.InstalledVersion, m.p.InstalledSchematic = m.p.Hardware.TalosVersion, m.p.Hardware.Schematic
	m.p.SystemDisk = m.installDiskLocked(ctx)
	m.p.Slot = "A"
	err := m.p.save(m.dir)
	sys := m.p.SystemDisk
	m.mu.Unlock()

	if err != nil {
		m.world.logf("machine %s: saving state: %v", m.Name(), err)
	}

	if err := setSystemDisk(context.Background(), m.st, sys); err != nil {
		m.world.logf("machine %s: %v", m.Name(), err)
	}

	m.rebootSeq(runtime.MachineStageRebooting, nil)(ctx)
}

// installDiskLocked finds the install target: machine.install.disk, its selector, the
// UnattendedInstallConfig selector, or the first disk.
func (m *Machine) installDiskLocked(ctx context.Context) string {
	disks := m.p.Hardware.Disks
	cfg := m.active

	if cfg != nil && cfg.Machine() != nil && cfg.Machine().Install() != nil {
		inst := cfg.Machine().Install()
		if d := strings.TrimPrefix(inst.Disk(), "/dev/"); d != "" {
			for _, disk := range disks {
				if disk.Name == d {
					return d
				}
			}
		}

		if expr, err := inst.DiskMatchExpression(); err == nil && expr != nil {
			if matched, err := blockhelpers.MatchDisks(ctx, m.st, expr); err == nil && len(matched) > 0 {
				return matched[0].Metadata().ID()
			}
		}
	}

	if cfg != nil {
		if u := cfg.UnattendedInstallConfig(); u != nil {
			expr := u.VolumeSelector()
			if !expr.IsZero() {
				if matched, err := blockhelpers.MatchDisks(ctx, m.st, &expr); err == nil && len(matched) > 0 {
					return matched[0].Metadata().ID()
				}
			}
		}
	}

	if len(disks) > 0 {
		return disks[0].Name
	}

	return ""
}

func setSystemDisk(ctx context.Context, st state.State, disk string) error {
	if disk == "" {
		return destroyIfExists(ctx, st, resource.NewMetadata(block.NamespaceName, block.SystemDiskType, block.SystemDiskID, resource.VersionUndefined))
	}

	return put(ctx, st, block.NewSystemDisk(block.NamespaceName, block.SystemDiskID), func(r *block.SystemDisk) {
		r.TypedSpec().DiskID = disk
		r.TypedSpec().DevPath = "/dev/" + disk
	})
}
