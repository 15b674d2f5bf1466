package talosemu

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/google/uuid"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/api/storage"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	talosruntime "github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// platformMetal is the platform and mode an emulated machine reports.
const platformMetal = "metal"

// apiServer implements MachineService. Methods not defined here answer Unimplemented
// through the embedded generated server.
type apiServer struct {
	machine.UnimplementedMachineServiceServer

	m *Machine
}

// validationMode is the runtime mode passed to config validation: metal, requiring an install
// until Talos is installed (t:…/v1alpha1_server.go modeWrapper).
type validationMode struct{ installed bool }

func (v validationMode) String() string        { return platformMetal }
func (v validationMode) RequiresInstall() bool { return !v.installed }
func (v validationMode) InContainer() bool     { return false }

// Version mirrors t:…/v1alpha1_server.go Version: features are reported only with a config.
func (s *apiServer) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	m := s.m

	m.mu.Lock()
	version, _ := m.runningVersionLocked()
	configured := m.active != nil
	m.mu.Unlock()

	var features *machine.FeaturesInfo
	if configured {
		features = &machine.FeaturesInfo{Rbac: true}
	}

	return &machine.VersionResponse{Messages: []*machine.Version{{
		Version: &machine.VersionInfo{
			Tag:       version,
			Sha:       seed(version)[:8],
			Built:     "",
			GoVersion: runtime.Version(),
			Os:        osLinux,
			Arch:      archAMD64,
		},
		Platform: &machine.PlatformInfo{Name: platformMetal, Mode: platformMetal},
		Features: features,
	}}}, nil
}

// Hostname reports the hostname from the config or the machine's default.
func (s *apiServer) Hostname(context.Context, *emptypb.Empty) (*machine.HostnameResponse, error) {
	s.m.mu.Lock()
	h := s.m.hostnameLocked()
	s.m.mu.Unlock()

	return &machine.HostnameResponse{Messages: []*machine.Hostname{{Hostname: h}}}, nil
}

// ApplyConfiguration follows t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go
// (release-1.14, ApplyConfiguration): one apply at a time, reader only in maintenance, AUTO is
// NO_REBOOT, REBOOT is Unimplemented outside maintenance, STAGED persists only, TRY rolls back.
//
//nolint:gocyclo,cyclop
func (s *apiServer) ApplyConfiguration(ctx context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	m := s.m

	if !m.applyMu.TryLock() {
		return nil, status.Error(codes.FailedPrecondition, "another apply configuration is already in progress")
	}
	defer m.applyMu.Unlock()

	if !sleepCtx(ctx, m.durations().Apply.D()) {
		return nil, status.FromContextError(ctx.Err()).Err()
	}

	inMaintenance := m.inMaintenance()

	if !inMaintenance && !rolesFrom(ctx).Includes(role.Admin) {
		return nil, errNotAuthorized
	}

	if in.Mode != machine.ApplyConfigurationRequest_TRY {
		m.cancelRollback()
	}

	cfg, err := configloader.NewFromBytes(in.GetData())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if !inMaintenance && cfg.RawV1Alpha1() == nil {
		return nil, status.Error(codes.InvalidArgument, "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?")
	}

	mode := in.Mode.String()

	if in.Mode == machine.ApplyConfigurationRequest_REBOOT { //nolint:staticcheck // Talos still accepts it in maintenance
		if !inMaintenance {
			return nil, status.Error(codes.Unimplemented, "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")
		}

		in.Mode = machine.ApplyConfigurationRequest_NO_REBOOT
	}

	m.mu.Lock()
	installed := m.p.Installed
	current := m.active
	m.mu.Unlock()

	warnings, err := cfg.ValidateAtRuntime(ctx, m.st, validationMode{installed: installed})
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	var details string

	switch in.Mode { //nolint:exhaustive // the rest is rejected
	case machine.ApplyConfigurationRequest_AUTO:
		in.Mode = machine.ApplyConfigurationRequest_NO_REBOOT
		mode = fmt.Sprintf("%s(%s)", mode, in.Mode)
		details = "Applied configuration without a reboot"
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
		details = "Applied configuration without a reboot"
	case machine.ApplyConfigurationRequest_STAGED:
		details = "Staged configuration to be applied after the next reboot"
	default:
		return nil, status.Errorf(codes.InvalidArgument, "incorrect mode '%s' specified for the apply config call", in.Mode.String())
	}

	if in.DryRun {
		var old talosconfig.Encoder = current
		if current == nil {
			empty, err := container.New()
			if err != nil {
				return nil, err
			}

			old = empty
		}

		diff, err := configdiff.DiffConfigs(old, cfg)
		if err != nil {
			return nil, fmt.Errorf("failed to generate diff: %w", err)
		}

		if diff == "" {
			diff = "No changes."
		}

		return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
			Mode:        in.Mode,
			ModeDetails: fmt.Sprintf("Dry run summary:\n%s (skipped in dry-run).\nConfig diff:\n\n%s", details, diff),
		}}}, nil
	}

	m.world.logf("machine %s: apply config request: mode %s", m.Name(), strings.ToLower(mode))

	switch in.Mode { //nolint:exhaustive // checked above
	case machine.ApplyConfigurationRequest_TRY:
		timeout := constants.ConfigTryTimeout
		if in.TryModeTimeout != nil {
			timeout = in.TryModeTimeout.AsDuration()
		}

		details += fmt.Sprintf("\nThe config is applied in 'try' mode and will be automatically reverted back in %s", timeout.String())

		m.scheduleRollback(timeout)

		if err := m.setActive(cfg); err != nil {
			return nil, err
		}
	case machine.ApplyConfigurationRequest_NO_REBOOT:
		if err := m.setPersistent(cfg); err != nil {
			return nil, err
		}

		if err := m.setActive(cfg); err != nil {
			return nil, err
		}
	case machine.ApplyConfigurationRequest_STAGED:
		if err := m.setPersistent(cfg); err != nil {
			return nil, err
		}
	}

	if inMaintenance && !m.inMaintenance() {
		m.leaveMaintenance()
	}

	if m.loseApplyAnswer.CompareAndSwap(true, false) {
		return nil, status.Error(codes.Unavailable, "error reading from server: EOF")
	}

	return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
		Mode:        in.Mode,
		Warnings:    warnings,
		ModeDetails: details,
	}}}, nil
}

// Reboot is asynchronous: the reply comes first, then the machine goes down.
func (s *apiServer) Reboot(context.Context, *machine.RebootRequest) (*machine.RebootResponse, error) {
	actor := uuid.New().String()

	if s.m.ignoreReboot.CompareAndSwap(true, false) {
		return &machine.RebootResponse{Messages: []*machine.Reboot{{ActorId: actor}}}, nil
	}

	s.m.setActor(actor)
	s.m.publishSequence("reboot", machine.SequenceEvent_START, actor)
	s.m.sequence(s.m.rebootSeq(talosruntime.MachineStageRebooting, nil))

	return &machine.RebootResponse{Messages: []*machine.Reboot{{ActorId: actor}}}, nil
}

// Shutdown powers the machine off; it answers again only after a power-on through the control API.
// force (skip the cordon and drain) is recorded, not acted on: the emulator drains nothing here.
func (s *apiServer) Shutdown(_ context.Context, in *machine.ShutdownRequest) (*machine.ShutdownResponse, error) {
	s.m.recordShutdown(in.GetForce())

	actor := uuid.New().String()

	s.m.setActor(actor)
	s.m.publishSequence("shutdown", machine.SequenceEvent_START, actor)
	s.m.sequence(s.m.powerOffSeq(talosruntime.MachineStageShuttingDown, nil))

	return &machine.ShutdownResponse{Messages: []*machine.Shutdown{{ActorId: actor}}}, nil
}

var systemPartitionLabels = []string{
	constants.EFIPartitionLabel, constants.BIOSGrubPartitionLabel, constants.BootPartitionLabel,
	constants.MetaPartitionLabel, constants.StatePartitionLabel, constants.EphemeralPartitionLabel,
}

// Reset follows t:…/v1alpha1_server.go Reset and the reset sequence
// (t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go): an empty partition
// list (mode other than USER_DISKS) wipes the whole system disk; wiping STATE removes the
// config, so the machine returns to maintenance; reboot=false powers it off afterwards.
func (s *apiServer) Reset(_ context.Context, in *machine.ResetRequest) (*machine.ResetResponse, error) {
	m := s.m

	if len(in.GetUserDisksToWipe()) > 0 {
		if in.Mode == machine.ResetRequest_SYSTEM_DISK {
			return nil, fmt.Errorf("reset failed: invalid input, wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter")
		}

		m.mu.Lock()
		disks := m.p.Hardware.Disks
		sys := m.p.SystemDisk
		m.mu.Unlock()

		for _, dev := range in.GetUserDisksToWipe() {
			found := slices.ContainsFunc(disks, func(d diskHW) bool { return "/dev/"+d.Name == dev })
			if !found {
				return nil, fmt.Errorf("reset user disk failed: device %s wasn't found", dev)
			}

			if sys != "" && "/dev/"+sys == dev {
				return nil, fmt.Errorf("reset user disk failed: device %s is the system disk", dev)
			}
		}
	}

	wipeAll := len(in.GetSystemPartitionsToWipe()) == 0 && in.Mode != machine.ResetRequest_USER_DISKS
	wipeState, wipeEphemeral := false, false

	if len(in.GetSystemPartitionsToWipe()) > 0 {
		if in.Mode == machine.ResetRequest_USER_DISKS {
			return nil, fmt.Errorf("reset failed: invalid input, wipe mode USER_DISKS doesn't support SystemPartitionsToWipe parameter")
		}

		for _, p := range in.GetSystemPartitionsToWipe() {
			if !slices.Contains(systemPartitionLabels, p.GetLabel()) {
				return nil, fmt.Errorf("failed to get volume status with label %q: resource VolumeStatuses.block.talos.dev(runtime/%s@undefined) doesn't exist", p.GetLabel(), p.GetLabel())
			}

			if p.GetWipe() && p.GetLabel() == constants.StatePartitionLabel {
				wipeState = true
			}

			if p.GetWipe() && p.GetLabel() == constants.EphemeralPartitionLabel {
				wipeEphemeral = true
			}
		}
	}

	if in.Mode == machine.ResetRequest_USER_DISKS {
		wipeAll, wipeState, wipeEphemeral = false, false, false
	}

	wipe := func() {
		m.mu.Lock()
		defer m.mu.Unlock()

		var err error

		switch {
		case wipeAll:
			err = m.wipeSystemDiskLocked()
		case wipeState:
			err = m.wipeStateLocked()
		}

		if err == nil && (wipeAll || wipeEphemeral) {
			err = m.wipeEphemeral()
		}

		if err != nil {
			m.world.logf("machine %s: reset: %v", m.Name(), err)
		}
	}

	next := m.powerOffSeq(talosruntime.MachineStageResetting, wipe)
	if in.GetReboot() {
		next = m.rebootSeq(talosruntime.MachineStageResetting, wipe)
	}

	graceful := in.GetGraceful()
	actor := uuid.New().String()

	m.setActor(actor)
	m.publishSequence("reset", machine.SequenceEvent_START, actor)
	m.sequence(func(ctx context.Context) {
		// a graceful reset cordons and drains the node, then leaves etcd before wiping
		// (t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go Reset:
		// CordonAndDrainNode, LeaveEtcd)
		if graceful {
			m.setStage(talosruntime.MachineStageResetting, false)
			m.cordonAndDrain(ctx)

			if m.runningEtcd() != nil {
				if err := m.leaveEtcd(ctx); err != nil {
					m.world.logf("machine %s: reset: leaving etcd: %v", m.Name(), err)
				}
			}
		}

		next(ctx)
	})

	return &machine.ResetResponse{Messages: []*machine.Reset{{ActorId: actor}}}, nil
}

// Upgrade is the legacy upgrade RPC (t:…/v1alpha1_server.go Upgrade): FailedPrecondition when
// Talos is not installed; otherwise the reply comes first, then the machine upgrades and reboots.
func (s *apiServer) Upgrade(_ context.Context, in *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	m := s.m

	m.mu.Lock()
	installed := m.p.Installed
	m.mu.Unlock()

	if !installed {
		return nil, status.Errorf(codes.FailedPrecondition, "Talos is not installed")
	}

	pend, err := parseInstallerImage(in.GetImage())
	if err == nil {
		err = m.world.checkInstallerImage(pend)
	}

	if err != nil {
		return nil, fmt.Errorf("error validating installer image %q: %w", in.GetImage(), err)
	}

	upgrade := m.rebootSeq(talosruntime.MachineStageUpgrading, func() { m.stageUpgrade(pend) })
	actor := uuid.New().String()

	m.setActor(actor)
	m.publishSequence("upgrade", machine.SequenceEvent_START, actor)
	m.sequence(func(ctx context.Context) {
		// Talos cordons and drains the node before upgrading
		// (t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go Upgrade)
		m.setStage(talosruntime.MachineStageUpgrading, false)
		m.cordonAndDrain(ctx)
		upgrade(ctx)
	})

	return &machine.UpgradeResponse{Messages: []*machine.Upgrade{{
		Ack:     "Upgrade request received",
		ActorId: actor,
	}}}, nil
}

// storageServer implements StorageService/Disks from the block.Disk resources, as
// t:internal/app/storaged/server.go does.
type storageServer struct {
	storage.UnimplementedStorageServiceServer

	m *Machine
}

func (s *storageServer) Disks(ctx context.Context, _ *emptypb.Empty) (*storage.DisksResponse, error) {
	s.m.mu.Lock()
	sys := s.m.p.SystemDisk
	s.m.mu.Unlock()

	disks, err := safe.StateListAll[*block.Disk](ctx, s.m.st)
	if err != nil {
		return nil, err
	}

	out := &storage.Disks{}

	for d := range disks.All() {
		spec := d.TypedSpec()

		var typ storage.Disk_DiskType

		switch {
		case spec.CDROM:
			typ = storage.Disk_CD
		case spec.Transport == "nvme":
			typ = storage.Disk_NVME
		case spec.Rotational:
			typ = storage.Disk_HDD
		case spec.Transport != "":
			typ = storage.Disk_SSD
		}

		out.Disks = append(out.Disks, &storage.Disk{
			DeviceName: "/dev/" + d.Metadata().ID(),
			Model:      spec.Model,
			Size:       spec.Size,
			Serial:     spec.Serial,
			Modalias:   spec.Modalias,
			Wwid:       spec.WWID,
			Uuid:       spec.UUID,
			Type:       typ,
			BusPath:    spec.BusPath,
			SystemDisk: sys != "" && d.Metadata().ID() == sys,
			Subsystem:  spec.SubSystem,
			Readonly:   spec.Readonly,
		})
	}

	return &storage.DisksResponse{Messages: []*storage.Disks{out}}, nil
}

// imageServer implements ImageService Pull (the first step of talosctl's upgrade flow,
// t:cmd/talosctl/cmd/talos/upgrade.go, and of Ichor's Kubernetes upgrade) and List
// (kubeversions.go).
type imageServer struct {
	machine.UnimplementedImageServiceServer

	m *Machine
}

// lifecycleServer implements LifecycleService/Upgrade, which writes the new version to the other
// slot and does not reboot (t:internal/app/lifecycle/lifecycle.go).
type lifecycleServer struct {
	machine.UnimplementedLifecycleServiceServer

	m *Machine
}

func (s *lifecycleServer) Upgrade(in *machine.LifecycleServiceUpgradeRequest, srv grpc.ServerStreamingServer[machine.LifecycleServiceUpgradeResponse]) error {
	m := s.m

	if !m.applyMu.TryLock() {
		return status.Error(codes.FailedPrecondition, "another installation/upgrade is already in progress")
	}
	defer m.applyMu.Unlock()

	m.mu.Lock()
	installed := m.p.Installed
	m.mu.Unlock()

	if !installed {
		return status.Error(codes.FailedPrecondition, "machine is not installed")
	}

	image := in.GetSource().GetImageName()
	if image == "" {
		return status.Error(codes.InvalidArgument, "installer image name is required")
	}

	msg := func(s string) error {
		return srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
			Response: &machine.LifecycleServiceInstallProgress_Message{Message: s},
		}})
	}

	exit := func(code int32) error {
		return srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: &machine.LifecycleServiceInstallProgress{
			Response: &machine.LifecycleServiceInstallProgress_ExitCode{ExitCode: code},
		}})
	}

	pend, err := parseInstallerImage(image)
	if err != nil {
		if err := msg(fmt.Sprintf("error validating installer image %q: %v", image, err)); err != nil {
			return err
		}

		return exit(1)
	}

	if err := m.world.checkInstallerImage(pend); err != nil {
		return lifecycleUpgradeError(err)
	}

	for _, line := range []string{
		"running installer " + image,
		"installing Talos " + pend.Version + " to the inactive boot slot",
		"upgrade complete; reboot to activate",
	} {
		if err := msg(line); err != nil {
			return err
		}
	}

	m.stageUpgrade(pend)

	return exit(0)
}

func (m *Machine) stageUpgrade(p *pendingUpgrade) {
	m.mu.Lock()
	defer m.mu.Unlock()

	m.p.Pending = p

	if err := m.p.save(m.dir); err != nil {
		m.world.logf("machine %s: saving state: %v", m.Name(), err)
	}
}

// parseInstallerImage takes the version from the tag and the schematic from an Image Factory
// path (factory.talos.dev/<flavor>/<schematic>:<version>).
func parseInstallerImage(ref string) (*pendingUpgrade, error) {
	if ref == "" {
		return nil, fmt.Errorf("image reference is empty")
	}

	name, tag := ref, ""

	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		name, tag = ref[:i], ref[i+1:]
	}

	if i := strings.Index(tag, "@"); i >= 0 {
		tag = tag[:i]
	}

	if !strings.HasPrefix(tag, "v") || strings.Count(tag, ".") < 2 {
		return nil, fmt.Errorf("tag %q is not a Talos version (like v1.14.1)", tag)
	}

	schematic := DefaultSchematicID
	parts := strings.Split(name, "/")

	if len(parts) >= 3 && len(parts[len(parts)-1]) == 64 {
		schematic = parts[len(parts)-1]
	}

	return &pendingUpgrade{Version: tag, Schematic: schematic, Image: ref}, nil
}
