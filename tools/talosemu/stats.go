package talosemu

import (
	"context"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/protobuf/types/known/emptypb"
)

// emuThreads is the emulated CPU, as seedHardware describes it: one socket of
// 8 threads (the 8 GiB module is memoryKiB, staticpods.go).
const emuThreads = 8

// SystemStat reports /proc/stat as machined reads it
// (t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go SystemStat):
// the boot time in seconds since the epoch and the CPU time, in seconds,
// total and per CPU. The emulated CPUs are 20% busy since boot.
func (s *apiServer) SystemStat(context.Context, *emptypb.Empty) (*machine.SystemStatResponse, error) {
	s.m.mu.Lock()
	booted := s.m.bootedAt
	s.m.mu.Unlock()

	if booted.IsZero() {
		booted = time.Now()
	}

	up := time.Since(booted).Seconds()
	cpu := func(n float64) *machine.CPUStat {
		return &machine.CPUStat{User: 0.15 * up * n, System: 0.05 * up * n, Idle: 0.8 * up * n}
	}

	stat := &machine.SystemStat{BootTime: uint64(max(booted.Unix(), 0)), CpuTotal: cpu(emuThreads)}

	for range emuThreads {
		stat.Cpu = append(stat.Cpu, cpu(1))
	}

	return &machine.SystemStatResponse{Messages: []*machine.SystemStat{stat}}, nil
}

// LoadAvg reports /proc/loadavg (t:…/v1alpha1_server.go LoadAvg).
func (s *apiServer) LoadAvg(context.Context, *emptypb.Empty) (*machine.LoadAvgResponse, error) {
	return &machine.LoadAvgResponse{Messages: []*machine.LoadAvg{{Load1: 0.42, Load5: 0.35, Load15: 0.3}}}, nil
}

// Mounts reports the mounted filesystems with their size and free space, as
// machined reads them from /proc/mounts and statfs (t:…/v1alpha1_server.go
// Mounts): once installed, EPHEMERAL on /var takes the first disk after its
// system partitions, a tenth of it used; the rest are virtual filesystems.
func (s *apiServer) Mounts(context.Context, *emptypb.Empty) (*machine.MountsResponse, error) {
	s.m.mu.Lock()
	disks := s.m.p.Hardware.Disks
	installed := s.m.persistentCfg != nil
	s.m.mu.Unlock()

	stats := []*machine.MountStat{
		{Filesystem: "overlay", MountedOn: "/", Size: 0},
		{Filesystem: "tmpfs", MountedOn: "/run", Size: 1 << 30, Available: 1 << 30},
	}

	if installed && len(disks) > 0 {
		const system = 6 << 30 // EFI, META, STATE and the image

		if size := disks[0].Size; size > system {
			eph := size - system
			dev := "/dev/" + disks[0].Name
			if last := dev[len(dev)-1]; last >= '0' && last <= '9' {
				dev += "p" // nvme0n1p6, sda6
			}

			stats = append(stats, &machine.MountStat{Filesystem: dev + "6", MountedOn: "/var", Size: eph, Available: eph - eph/10})
		}
	}

	return &machine.MountsResponse{Messages: []*machine.Mounts{{Stats: stats}}}, nil
}
