package talosemu_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	stdx509 "crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/crypto/x509"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/api/storage"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// target is what a conformance check runs against: an emulated machine or a real node.
type target struct {
	endpoint string
	// emulator only
	world   *talosemu.World
	machine *talosemu.Machine
	cluster *cluster
	// admin returns a configured-mode admin client (emulator: generated talosconfig; real
	// node: the talosconfig from the environment).
	admin func(t *testing.T) *client.Client
}

// needs says which kind of node a check needs, and so whether it can run on a real node.
type needs int

const (
	// needsMaintenance: a node in maintenance mode; read-only checks.
	needsMaintenance needs = iota
	// needsConfigured: a configured node and an admin talosconfig; read-only checks.
	needsConfigured
	// emulatorOnly: the check changes the node (apply, reboot, reset, upgrade) or needs the
	// control API or the cluster's CA key; it never runs against a real node.
	emulatorOnly
)

type check struct {
	name string
	// cite is the upstream Talos file whose behaviour the check verifies.
	cite  string
	needs needs
	// worker provisions the emulated machine as a worker instead of a control plane.
	worker bool
	run    func(t *testing.T, tg *target)
}

func codeOf(err error) codes.Code { return status.Code(err) }

func wantCode(t *testing.T, err error, code codes.Code, msgPart string) {
	t.Helper()

	if err == nil {
		t.Fatalf("want %s error, got success", code)
	}

	if codeOf(err) != code {
		t.Fatalf("want %s, got %s: %v", code, codeOf(err), err)
	}

	if msgPart != "" && !strings.Contains(status.Convert(err).Message(), msgPart) {
		t.Fatalf("want message containing %q, got %q", msgPart, status.Convert(err).Message())
	}
}

// checks is the conformance suite. Each check names the upstream file it verifies.
var checks = []check{
	{
		name: "maintenance/Version", needs: needsMaintenance,
		cite: "t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go (Version: features only with a config)",
		run: func(t *testing.T, tg *target) {
			cl := maintenanceClient(t, tg.endpoint)

			resp, err := cl.Version(t.Context())
			if err != nil {
				t.Fatal(err)
			}

			v := resp.GetMessages()[0]
			if !strings.HasPrefix(v.GetVersion().GetTag(), "v1.") {
				t.Fatalf("unexpected version tag %q", v.GetVersion().GetTag())
			}

			if v.GetFeatures() != nil {
				t.Fatalf("features must be nil without a machine config, got %v", v.GetFeatures())
			}

			if v.GetPlatform().GetName() == "" {
				t.Fatal("platform name missing")
			}
		},
	},
	{
		name: "maintenance/Disks", needs: needsMaintenance,
		cite: "t:internal/app/storaged/server.go (Disks from block.Disk; NVMe type from transport)",
		run: func(t *testing.T, tg *target) {
			cl := maintenanceClient(t, tg.endpoint)

			resp, err := cl.Disks(t.Context())
			if err != nil {
				t.Fatal(err)
			}

			disks := resp.GetMessages()[0].GetDisks()
			if len(disks) == 0 {
				t.Fatal("no disks reported")
			}

			for _, d := range disks {
				if !strings.HasPrefix(d.GetDeviceName(), "/dev/") || d.GetSize() == 0 {
					t.Fatalf("implausible disk %v", d)
				}

				if d.GetType() == storage.Disk_NVME && (d.GetWwid() == "" || d.GetSerial() == "") {
					t.Fatalf("NVMe disk without WWID/serial: %v", d)
				}

				if d.GetSystemDisk() {
					t.Fatalf("a maintenance node has no system disk, got %v", d)
				}
			}

			if tg.machine == nil {
				return
			}

			// the emulated machine has one NVMe disk and one virtio disk
			var nvme, virtio *storage.Disk

			for _, d := range disks {
				switch d.GetDeviceName() {
				case "/dev/nvme0n1":
					nvme = d
				case "/dev/vda":
					virtio = d
				}
			}

			if nvme == nil || virtio == nil {
				t.Fatalf("want nvme0n1 and vda, got %v", disks)
			}

			if nvme.GetType() != storage.Disk_NVME || virtio.GetType() != storage.Disk_SSD {
				t.Fatalf("types: nvme %s, virtio %s", nvme.GetType(), virtio.GetType())
			}

			if virtio.GetWwid() != "" || virtio.GetSerial() != "" {
				t.Fatalf("virtio-blk must have neither WWID nor serial: %v", virtio)
			}

			if virtio.GetSize() != 20<<30 {
				t.Fatalf("virtio size %d, want 20GiB", virtio.GetSize())
			}
		},
	},
	{
		name: "maintenance/COSI-reads", needs: needsMaintenance,
		cite: "t:internal/app/resources/access.go (read access for os:reader to non-sensitive registered types)",
		run: func(t *testing.T, tg *target) {
			cl := maintenanceClient(t, tg.endpoint)
			ctx := t.Context()

			ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, cl.COSI, runtime.MachineStatusID)
			if err != nil {
				t.Fatal(err)
			}

			if ms.TypedSpec().Stage != runtime.MachineStageMaintenance {
				t.Fatalf("stage %s, want maintenance", ms.TypedSpec().Stage)
			}

			si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, cl.COSI, hardware.SystemInformationID)
			if err != nil {
				t.Fatal(err)
			}

			if _, err := safe.StateGetByID[*runtime.Version](ctx, cl.COSI, "version"); err != nil {
				t.Fatal(err)
			}

			if _, err := safe.StateGetByID[*runtime.SecurityState](ctx, cl.COSI, runtime.SecurityStateID); err != nil {
				t.Fatal(err)
			}

			disks, err := safe.StateListAll[*block.Disk](ctx, cl.COSI)
			if err != nil || disks.Len() == 0 {
				t.Fatalf("disks: %d, %v", disks.Len(), err)
			}

			links, err := safe.StateListAll[*network.LinkStatus](ctx, cl.COSI)
			if err != nil {
				t.Fatal(err)
			}

			physical := 0

			for l := range links.All() {
				if l.TypedSpec().Physical() {
					physical++

					if len(l.TypedSpec().PermanentAddr) == 0 {
						t.Fatalf("physical link %s without permanent address", l.Metadata().ID())
					}
				}
			}

			if physical == 0 {
				t.Fatal("no physical links")
			}

			rds, err := safe.StateListAll[*meta.ResourceDefinition](ctx, cl.COSI)
			if err != nil {
				t.Fatal(err)
			}

			names := map[string]bool{}
			for rd := range rds.All() {
				names[rd.TypedSpec().Type] = true
			}

			for _, typ := range []resource.Type{
				runtime.MachineStatusType, runtime.VersionType, hardware.SystemInformationType, block.DiskType,
				network.LinkStatusType, runtime.SecurityStateType, runtime.ImageFactorySchematicType, configres.MachineConfigType,
				hardware.ProcessorType, hardware.MemoryModuleType,
			} {
				if !names[typ] {
					t.Errorf("resource definition %s not registered", typ)
				}
			}

			if _, err := safe.StateListAll[*hardware.Processor](ctx, cl.COSI); err != nil {
				t.Fatal(err)
			}

			if tg.machine != nil {
				if si.TypedSpec().UUID != tg.machine.UUID() {
					t.Fatalf("uuid %q, want %q", si.TypedSpec().UUID, tg.machine.UUID())
				}

				sch, err := safe.StateGetByID[*runtime.ImageFactorySchematic](ctx, cl.COSI, runtime.ImageFactorySchematicID)
				if err != nil {
					t.Fatal(err)
				}

				if sch.TypedSpec().SchematicID != talosemu.DefaultSchematicID {
					t.Fatalf("schematic %q", sch.TypedSpec().SchematicID)
				}
			}
		},
	},
	{
		name: "maintenance/MachineConfig-sensitive", needs: needsMaintenance,
		cite: "t:internal/app/resources/access.go (Sensitive types need os:admin)",
		run: func(t *testing.T, tg *target) {
			cl := maintenanceClient(t, tg.endpoint)

			_, err := safe.StateGetByID[*configres.MachineConfig](t.Context(), cl.COSI, configres.ActiveID)
			wantCode(t, err, codes.PermissionDenied, "not authorized")
		},
	},
	{
		name: "maintenance/writes-rejected", needs: needsMaintenance,
		cite: "t:internal/app/machined/pkg/system/services/machined.go (cosi Create needs os:admin)",
		run: func(t *testing.T, tg *target) {
			cl := maintenanceClient(t, tg.endpoint)

			err := cl.COSI.Create(t.Context(), network.NewHostnameStatus(network.NamespaceName, "evil"))
			wantWrapped(t, err, codes.PermissionDenied, "not authorized")
		},
	},
	{
		name: "maintenance/admin-RPCs-denied", needs: needsMaintenance,
		cite: "t:pkg/grpc/middleware/authz/injector.go (maintenance callers are os:reader) + machined.go rules",
		run: func(t *testing.T, tg *target) {
			cl := maintenanceClient(t, tg.endpoint)

			wantCode(t, cl.Reboot(t.Context()), codes.PermissionDenied, "not authorized")
			wantCode(t, cl.Reset(t.Context(), true, true), codes.PermissionDenied, "not authorized")
		},
	},
	{
		name: "maintenance/fingerprint-pinning", needs: needsMaintenance,
		cite: "m:client/options.go (WithMaintenanceMode pins the leaf SPKI fingerprint)",
		run: func(t *testing.T, tg *target) {
			wrong := "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

			cl := maintenanceClient(t, tg.endpoint, wrong)

			_, err := cl.Version(t.Context())
			if err == nil || !strings.Contains(err.Error(), "doesn't match the provided fingerprints") {
				t.Fatalf("want fingerprint mismatch, got %v", err)
			}

			if tg.machine == nil {
				return
			}

			ok := maintenanceClient(t, tg.endpoint, tg.machine.MaintenanceFingerprint())
			if _, err := ok.Version(t.Context()); err != nil {
				t.Fatalf("pinned fingerprint rejected: %v", err)
			}
		},
	},
	{
		name: "maintenance/Watch", needs: needsMaintenance,
		cite: "t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go (State served by cosi server.NewState behind AccessPolicy) + t:internal/app/resources/access.go",
		run: func(t *testing.T, tg *target) {
			cl := maintenanceClient(t, tg.endpoint)

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()

			events := make(chan state.Event, 64)

			if err := cl.COSI.WatchKind(ctx, resource.NewMetadata(block.NamespaceName, block.DiskType, "", resource.VersionUndefined), events, state.WithBootstrapContents(true)); err != nil {
				t.Fatal(err)
			}

			created := 0

			for {
				select {
				case ev := <-events:
					switch ev.Type { //nolint:exhaustive // only these matter here
					case state.Created:
						created++
					case state.Bootstrapped:
						if created == 0 {
							t.Fatal("bootstrapped without any disk")
						}

						return
					case state.Errored:
						t.Fatalf("watch error: %v", ev.Error)
					}
				case <-ctx.Done():
					t.Fatal("no bootstrapped event")
				}
			}
		},
	},
	{
		name: "maintenance/unsupported-type", needs: emulatorOnly,
		cite: "t:internal/app/resources/access.go (a type without ResourceDefinition is PermissionDenied \"resource type … is not supported\")",
		run: func(t *testing.T, tg *target) {
			cl := maintenanceClient(t, tg.endpoint)

			// the emulator does not register KubeletSpecs; real Talos registers every type
			_, err := cl.COSI.Get(t.Context(), resource.NewMetadata("k8s", "KubeletSpecs.kubernetes.talos.dev", "kubelet", resource.VersionUndefined))
			wantWrapped(t, err, codes.PermissionDenied, `resource type "KubeletSpecs.kubernetes.talos.dev" is not supported`)
		},
	},
	{
		name: "lifecycle/Reset-invalid-input", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go Reset (unknown volume label, partitions with USER_DISKS, unknown user disk)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)
			ctx := t.Context()

			err := admin.ResetGeneric(ctx, &machineapi.ResetRequest{
				SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{{Label: "NOPE", Wipe: true}},
			})
			if err == nil || !strings.Contains(err.Error(), `failed to get volume status with label "NOPE"`) {
				t.Fatalf("unknown label: %v", err)
			}

			err = admin.ResetGeneric(ctx, &machineapi.ResetRequest{
				Mode:                   machineapi.ResetRequest_USER_DISKS,
				SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{{Label: "STATE", Wipe: true}},
			})
			if err == nil || !strings.Contains(err.Error(), "USER_DISKS doesn't support SystemPartitionsToWipe") {
				t.Fatalf("USER_DISKS with partitions: %v", err)
			}

			err = admin.ResetGeneric(ctx, &machineapi.ResetRequest{
				Mode: machineapi.ResetRequest_USER_DISKS, UserDisksToWipe: []string{"/dev/nope"},
			})
			if err == nil || !strings.Contains(err.Error(), "device /dev/nope wasn't found") {
				t.Fatalf("unknown user disk: %v", err)
			}

			err = admin.ResetGeneric(ctx, &machineapi.ResetRequest{
				Mode: machineapi.ResetRequest_USER_DISKS, UserDisksToWipe: []string{"/dev/nvme0n1"},
			})
			if err == nil || !strings.Contains(err.Error(), "is the system disk") {
				t.Fatalf("system disk as user disk: %v", err)
			}

			if st := mustStage(t, admin); st != runtime.MachineStageRunning {
				t.Fatalf("stage %s after rejected resets", st)
			}
		},
	},
	{
		name: "apply/invalid-config", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go ApplyConfiguration (load or ValidateAtRuntime failure is InvalidArgument)",
		run: func(t *testing.T, tg *target) {
			cl := maintenanceClient(t, tg.endpoint)

			_, err := cl.ApplyConfiguration(t.Context(), applyRequest([]byte("machine: [not, a, config")))
			wantCode(t, err, codes.InvalidArgument, "")

			// loads, but fails validation: HostnameConfig with both auto and a fixed hostname
			bad := bytes.Replace(tg.cluster.worker, []byte("kind: HostnameConfig\nauto: stable"), []byte("kind: HostnameConfig\nauto: stable\nhostname: both"), 1)

			_, err = cl.ApplyConfiguration(t.Context(), applyRequest(bad))
			wantCode(t, err, codes.InvalidArgument, "")
			t.Logf("validation error: %v", err)

			ms := mustStage(t, cl)
			if ms != runtime.MachineStageMaintenance {
				t.Fatalf("stage %s after rejected applies", ms)
			}
		},
	},
	{
		name: "apply/dry-run", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go ApplyConfiguration (dry_run: Dry run summary with a config diff, nothing applied)",
		run: func(t *testing.T, tg *target) {
			cl := maintenanceClient(t, tg.endpoint)

			req := applyRequest(tg.cluster.worker)
			req.DryRun = true

			resp, err := cl.ApplyConfiguration(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}

			msg := resp.GetMessages()[0]
			if !strings.Contains(msg.GetModeDetails(), "Dry run summary") || !strings.Contains(msg.GetModeDetails(), "Config diff") {
				t.Fatalf("mode details %q", msg.GetModeDetails())
			}

			if msg.GetMode() != machineapi.ApplyConfigurationRequest_NO_REBOOT {
				t.Fatalf("mode %s, want NO_REBOOT", msg.GetMode())
			}

			if st := mustStage(t, cl); st != runtime.MachineStageMaintenance {
				t.Fatalf("stage %s after dry run", st)
			}
		},
	},
	{
		name: "apply/first-config-installs", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go ApplyConfiguration + t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go (install, reboot, boot)",
		run: func(t *testing.T, tg *target) {
			// make the install long enough to observe
			d := fastDurations()
			d.Install = talosemu.Duration(time.Second)

			if err := tg.machine.SetDurations(&d); err != nil {
				t.Fatal(err)
			}

			before := tg.machine.Info()
			cl := maintenanceClient(t, tg.endpoint)

			resp, err := cl.ApplyConfiguration(t.Context(), applyRequest(tg.cluster.controlPlane))
			if err != nil {
				t.Fatal(err)
			}

			if got := resp.GetMessages()[0].GetMode(); got != machineapi.ApplyConfigurationRequest_NO_REBOOT {
				t.Fatalf("mode %s, want NO_REBOOT (AUTO)", got)
			}

			// the RPC returned before the install finished
			if tg.machine.Info().Installed {
				t.Fatal("machine already installed when ApplyConfiguration returned")
			}

			waitStage(t, tg.cluster.adminFactory(tg.endpoint), runtime.MachineStageInstalling)
			waitStage(t, tg.cluster.adminFactory(tg.endpoint), runtime.MachineStageRunning)

			after := tg.machine.Info()
			if !after.Installed || after.BootID == before.BootID || after.Boots != before.Boots+1 {
				t.Fatalf("after install: installed=%v bootID changed=%v boots %d->%d", after.Installed, after.BootID != before.BootID, before.Boots, after.Boots)
			}

			// a maintenance client no longer gets in
			m := maintenanceClient(t, tg.endpoint)
			if _, err := m.Version(t.Context()); err == nil {
				t.Fatal("maintenance client still accepted after the config was applied")
			}

			admin := tg.admin(t)

			v, err := admin.Version(t.Context())
			if err != nil {
				t.Fatal(err)
			}

			if v.GetMessages()[0].GetFeatures() == nil || !v.GetMessages()[0].GetFeatures().GetRbac() {
				t.Fatal("configured node must report features.rbac")
			}

			disks, err := admin.Disks(t.Context())
			if err != nil {
				t.Fatal(err)
			}

			sys := ""

			for _, d := range disks.GetMessages()[0].GetDisks() {
				if d.GetSystemDisk() {
					sys = d.GetDeviceName()
				}
			}

			if sys != "/dev/nvme0n1" {
				t.Fatalf("system disk %q, want /dev/nvme0n1 (the UnattendedInstallConfig selector)", sys)
			}
		},
	},
	{
		name: "configured/mutual-TLS", needs: needsConfigured,
		cite: "t:internal/app/apid/pkg/provider/provider.go (ServerConfig: Mutual unless maintenance)",
		run: func(t *testing.T, tg *target) {
			cl := maintenanceClient(t, tg.endpoint)

			_, err := cl.Version(t.Context())
			if err == nil {
				t.Fatal("a client without certificate was accepted by a configured node")
			}

			if codeOf(err) != codes.Unavailable {
				t.Fatalf("want Unavailable (TLS handshake failure), got %s: %v", codeOf(err), err)
			}

			if _, err := tg.admin(t).Version(t.Context()); err != nil {
				t.Fatal(err)
			}
		},
	},
	{
		name: "configured/client-cert-ExtKeyUsage", needs: emulatorOnly,
		cite: "t:internal/app/apid/service.go (verifyExtKeyUsage: exactly [ClientAuth])",
		run: func(t *testing.T, tg *target) {
			crt := issueClientCert(t, tg.cluster, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth, stdx509.ExtKeyUsageServerAuth}, "os:admin")
			cfg := clientconfig.NewConfig("bad", []string{tg.endpoint}, tg.cluster.bundle.Certs.OS.Crt, crt)

			cl, err := client.New(t.Context(), client.WithConfig(cfg), client.WithEndpoints(tg.endpoint))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close() //nolint:errcheck

			_, err = cl.Version(t.Context())
			if err == nil {
				t.Fatal("certificate with ExtKeyUsage [ClientAuth ServerAuth] was accepted")
			}

			good := issueClientCert(t, tg.cluster, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}, "os:admin")
			cfg = clientconfig.NewConfig("good", []string{tg.endpoint}, tg.cluster.bundle.Certs.OS.Crt, good)

			ok, err := client.New(t.Context(), client.WithConfig(cfg), client.WithEndpoints(tg.endpoint))
			if err != nil {
				t.Fatal(err)
			}
			defer ok.Close() //nolint:errcheck

			if _, err := ok.Version(t.Context()); err != nil {
				t.Fatalf("certificate with ExtKeyUsage [ClientAuth] rejected: %v", err)
			}
		},
	},
	{
		name: "configured/roles-from-Organization", needs: emulatorOnly,
		cite: "t:pkg/grpc/middleware/authz/injector.go + t:internal/app/machined/pkg/system/services/machined.go (rules table)",
		run: func(t *testing.T, tg *target) {
			reader := tg.cluster.clientWithRoles(t, tg.endpoint, role.Reader)
			ctx := t.Context()

			if _, err := reader.Version(ctx); err != nil {
				t.Fatalf("reader Version: %v", err)
			}

			if _, err := safe.StateGetByID[*runtime.MachineStatus](ctx, reader.COSI, runtime.MachineStatusID); err != nil {
				t.Fatalf("reader MachineStatus: %v", err)
			}

			wantCode(t, reader.Reboot(ctx), codes.PermissionDenied, "not authorized")

			_, err := safe.StateGetByID[*configres.MachineConfig](ctx, reader.COSI, configres.ActiveID)
			wantCode(t, err, codes.PermissionDenied, "not authorized")

			_, err = reader.ApplyConfiguration(ctx, applyRequest(tg.cluster.controlPlane))
			wantCode(t, err, codes.PermissionDenied, "not authorized")

			backup := tg.cluster.clientWithRoles(t, tg.endpoint, role.EtcdBackup)

			_, err = backup.Version(ctx)
			wantCode(t, err, codes.PermissionDenied, "not authorized")

			// a certificate whose Organization names no known role gets nothing
			crt := issueClientCert(t, tg.cluster, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}, "os:unknown")

			none, err := client.New(ctx, client.WithConfig(clientconfig.NewConfig("none", []string{tg.endpoint}, tg.cluster.bundle.Certs.OS.Crt, crt)),
				client.WithEndpoints(tg.endpoint))
			if err != nil {
				t.Fatal(err)
			}
			defer none.Close() //nolint:errcheck

			_, err = none.Disks(ctx)
			wantCode(t, err, codes.PermissionDenied, "not authorized")

			admin := tg.admin(t)

			mc, err := safe.StateGetByID[*configres.MachineConfig](ctx, admin.COSI, configres.ActiveID)
			if err != nil {
				t.Fatalf("admin MachineConfig: %v", err)
			}

			if mc.Config().Machine().Type().String() != "controlplane" {
				t.Fatalf("machine type %s", mc.Config().Machine().Type())
			}

			err = admin.COSI.Create(ctx, network.NewHostnameStatus(network.NamespaceName, "evil"))
			wantWrapped(t, err, codes.PermissionDenied, "write access is not allowed")
		},
	},
	{
		name: "configured/controlplane-only-on-worker", needs: emulatorOnly, worker: true,
		cite: "t:internal/app/internal/machinehelper/machinehelper.go (CheckControlplane: Unimplemented on workers)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)

			_, err := admin.GenerateClientConfiguration(t.Context(), &machineapi.GenerateClientConfigurationRequest{
				Roles: []string{"os:reader"}, CrtTtl: durationpb.New(time.Hour),
			})
			wantCode(t, err, codes.Unimplemented, "control plane")
		},
	},
	{
		name: "configured/GenerateClientConfiguration", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go GenerateClientConfiguration (roles, TTL; InvalidArgument for ttl <= 0; context <role>@<cluster>); t:internal/app/machined/pkg/system/services/machined.go (admin only)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)
			ctx := t.Context()

			_, err := admin.GenerateClientConfiguration(ctx, &machineapi.GenerateClientConfigurationRequest{Roles: []string{"os:reader"}})
			wantCode(t, err, codes.InvalidArgument, "crt_ttl should be positive")

			_, err = admin.GenerateClientConfiguration(ctx, &machineapi.GenerateClientConfigurationRequest{
				Roles: []string{"os:reader"}, CrtTtl: durationpb.New(-time.Hour),
			})
			wantCode(t, err, codes.InvalidArgument, "crt_ttl should be positive")

			// readers may not generate client configurations
			reader := tg.cluster.clientWithRoles(t, tg.endpoint, "os:reader")

			_, err = reader.GenerateClientConfiguration(ctx, &machineapi.GenerateClientConfigurationRequest{
				Roles: []string{"os:admin"}, CrtTtl: durationpb.New(time.Hour),
			})
			wantCode(t, err, codes.PermissionDenied, "not authorized")

			resp, err := admin.GenerateClientConfiguration(ctx, &machineapi.GenerateClientConfigurationRequest{
				Roles: []string{"os:reader"}, CrtTtl: durationpb.New(time.Hour),
			})
			if err != nil {
				t.Fatal(err)
			}

			msg := resp.GetMessages()[0]

			cfg, err := clientconfig.FromBytes(msg.GetTalosconfig())
			if err != nil {
				t.Fatal(err)
			}

			// one role names the context "<role without os:>@<cluster>"
			if cfg.Context != "reader@emu" {
				t.Fatalf("talosconfig context %q, want reader@emu", cfg.Context)
			}

			// the certificate carries the role as its organization and lives for the TTL
			block, _ := pem.Decode(msg.GetCrt())
			if block == nil {
				t.Fatal("crt is not PEM")
			}

			crt, err := stdx509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}

			if life := crt.NotAfter.Sub(crt.NotBefore); len(crt.Subject.Organization) != 1 || crt.Subject.Organization[0] != "os:reader" ||
				life < 50*time.Minute || life > 2*time.Hour {
				t.Fatalf("certificate organization %v, validity %s (TTL 1h)", crt.Subject.Organization, life)
			}

			cl, err := client.New(ctx, client.WithConfig(cfg), client.WithEndpoints(tg.endpoint))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close() //nolint:errcheck

			if _, err := cl.Version(ctx); err != nil {
				t.Fatalf("generated reader talosconfig: %v", err)
			}

			wantCode(t, cl.Reboot(ctx), codes.PermissionDenied, "not authorized")
		},
	},
	{
		name: "configured/apply-modes", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go ApplyConfiguration (AUTO→NO_REBOOT, REBOOT Unimplemented, no v1alpha1 InvalidArgument)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)
			ctx := t.Context()
			boot := tg.machine.Info().BootID

			resp, err := admin.ApplyConfiguration(ctx, applyRequest(tg.cluster.controlPlane))
			if err != nil {
				t.Fatal(err)
			}

			if resp.GetMessages()[0].GetMode() != machineapi.ApplyConfigurationRequest_NO_REBOOT {
				t.Fatalf("AUTO became %s", resp.GetMessages()[0].GetMode())
			}

			req := applyRequest(tg.cluster.controlPlane)
			req.Mode = machineapi.ApplyConfigurationRequest_REBOOT //nolint:staticcheck // the deprecated mode is what is tested

			_, err = admin.ApplyConfiguration(ctx, req)
			wantCode(t, err, codes.Unimplemented, "REBOOT mode is not supported")

			noV1 := []byte("apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: x\n")

			_, err = admin.ApplyConfiguration(ctx, applyRequest(noV1))
			wantCode(t, err, codes.InvalidArgument, "doesn't contain v1alpha1")

			if tg.machine.Info().BootID != boot {
				t.Fatal("machine rebooted during NO_REBOOT applies")
			}
		},
	},
	{
		name: "configured/apply-staged", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go ApplyConfiguration (STAGED: SetPersistedConfig only, active at next boot)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)
			ctx := t.Context()
			staged := withHostname(tg.cluster.controlPlane, "staged-host")

			req := applyRequest(staged)
			req.Mode = machineapi.ApplyConfigurationRequest_STAGED

			resp, err := admin.ApplyConfiguration(ctx, req)
			if err != nil {
				t.Fatal(err)
			}

			if resp.GetMessages()[0].GetMode() != machineapi.ApplyConfigurationRequest_STAGED {
				t.Fatalf("mode %s", resp.GetMessages()[0].GetMode())
			}

			if h := hostname(t, admin); h == "staged-host" {
				t.Fatal("staged config became active before a reboot")
			}

			persistent, err := safe.StateGetByID[*configres.MachineConfig](ctx, admin.COSI, configres.PersistentID)
			if err != nil {
				t.Fatal(err)
			}

			if persistent.Config().NetworkHostnameConfig().Hostname() != "staged-host" {
				t.Fatal("persistent MachineConfig does not hold the staged config")
			}

			if err := admin.Reboot(ctx); err != nil {
				t.Fatal(err)
			}

			testenv.EventuallyOK(t, 20*time.Second, "staged hostname after reboot", func() (bool, string) {
				cl, err := tg.cluster.adminFactory(tg.endpoint)()
				if err != nil {
					return false, err.Error()
				}
				defer cl.Close() //nolint:errcheck

				resp, err := cl.MachineClient.Hostname(context.Background(), &emptypb.Empty{})
				if err != nil {
					return false, err.Error()
				}

				return resp.GetMessages()[0].GetHostname() == "staged-host", resp.GetMessages()[0].GetHostname()
			})
		},
	},
	{
		name: "configured/apply-try-rolls-back", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go ApplyConfiguration (TRY: SetConfig, rollback after try_mode_timeout)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)
			ctx := t.Context()
			original := hostname(t, admin)

			req := applyRequest(withHostname(tg.cluster.controlPlane, "try-host"))
			req.Mode = machineapi.ApplyConfigurationRequest_TRY
			req.TryModeTimeout = durationpb.New(500 * time.Millisecond)

			resp, err := admin.ApplyConfiguration(ctx, req)
			if err != nil {
				t.Fatal(err)
			}

			if !strings.Contains(resp.GetMessages()[0].GetModeDetails(), "automatically reverted") {
				t.Fatalf("mode details %q", resp.GetMessages()[0].GetModeDetails())
			}

			if h := hostname(t, admin); h != "try-host" {
				t.Fatalf("TRY config not active: hostname %q", h)
			}

			testenv.EventuallyOK(t, 10*time.Second, "rollback of the TRY config", func() (bool, string) {
				h := hostname(t, admin)

				return h == original, h
			})

			if tg.machine.Info().RollbackPending {
				t.Fatal("rollback still pending after it happened")
			}

			// a TRY replaced by a NO_REBOOT apply does not roll back: the pending rollback is
			// cancelled at once
			req.TryModeTimeout = durationpb.New(time.Hour)
			if _, err := admin.ApplyConfiguration(ctx, req); err != nil {
				t.Fatal(err)
			}

			if !tg.machine.Info().RollbackPending {
				t.Fatal("no rollback pending after a TRY apply")
			}

			if _, err := admin.ApplyConfiguration(ctx, applyRequest(withHostname(tg.cluster.controlPlane, "kept-host"))); err != nil {
				t.Fatal(err)
			}

			if tg.machine.Info().RollbackPending {
				t.Fatal("a NO_REBOOT apply did not cancel the pending TRY rollback")
			}

			if h := hostname(t, admin); h != "kept-host" {
				t.Fatalf("hostname %q after the NO_REBOOT apply", h)
			}
		},
	},
	{
		name: "configured/apply-concurrent", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go ApplyConfiguration (applyConfigMu.TryLock: FailedPrecondition)",
		run: func(t *testing.T, tg *target) {
			d := fastDurations()
			d.Apply = talosemu.Duration(time.Second)

			if err := tg.machine.SetDurations(&d); err != nil {
				t.Fatal(err)
			}

			admin := tg.admin(t)
			errs := make([]error, 2)

			var wg sync.WaitGroup

			for i := range errs {
				wg.Add(1)

				go func() {
					defer wg.Done()

					_, errs[i] = admin.ApplyConfiguration(context.Background(), applyRequest(tg.cluster.controlPlane))
				}()
			}

			wg.Wait()

			ok, failed := 0, 0

			for _, err := range errs {
				switch {
				case err == nil:
					ok++
				case codeOf(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "already in progress"):
					failed++
				default:
					t.Fatalf("unexpected error %v", err)
				}
			}

			if ok != 1 || failed != 1 {
				t.Fatalf("want one success and one FailedPrecondition, got %d and %d", ok, failed)
			}
		},
	},
	{
		name: "lifecycle/Reboot", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go Reboot (asynchronous, actor id) + MachineStage rebooting (m:resources/runtime/machinestage.go)",
		run: func(t *testing.T, tg *target) {
			d := fastDurations()
			d.Reboot = talosemu.Duration(time.Second)

			if err := tg.machine.SetDurations(&d); err != nil {
				t.Fatal(err)
			}

			before := tg.machine.Info()
			admin := tg.admin(t)

			watchCtx, cancel := context.WithCancel(t.Context())
			defer cancel()

			events := make(chan state.Event, 16)
			if err := admin.COSI.Watch(watchCtx, runtime.NewMachineStatus().Metadata(), events); err != nil {
				t.Fatal(err)
			}

			if err := admin.Reboot(t.Context()); err != nil {
				t.Fatal(err)
			}

			sawRebooting := false

			for !sawRebooting {
				select {
				case ev := <-events:
					if ev.Type == state.Errored {
						t.Fatalf("watch error before the rebooting stage: %v", ev.Error)
					}

					if ms, ok := ev.Resource.(*runtime.MachineStatus); ok && ms.TypedSpec().Stage == runtime.MachineStageRebooting {
						sawRebooting = true
					}
				case <-time.After(10 * time.Second):
					t.Fatal("no rebooting stage observed")
				}
			}

			waitStage(t, tg.cluster.adminFactory(tg.endpoint), runtime.MachineStageRunning)

			if after := tg.machine.Info(); after.BootID == before.BootID {
				t.Fatal("boot ID did not change")
			}
		},
	},
	{
		name: "lifecycle/Shutdown", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go Shutdown (powers off; nothing answers until power-on)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)

			if err := admin.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}

			testenv.EventuallyOK(t, 10*time.Second, "machine powered off", func() (bool, string) {
				return !tg.machine.Powered(), tg.machine.Info().Stage
			})

			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()

			if _, err := tg.admin(t).Version(ctx); err == nil {
				t.Fatal("a powered-off machine answered")
			}

			if code := control(t, tg.world, "POST", "/machines/"+tg.machine.Name()+"/power-on", "", nil); code != 200 {
				t.Fatalf("power-on: %d", code)
			}

			waitStage(t, tg.cluster.adminFactory(tg.endpoint), runtime.MachineStageRunning)
		},
	},
	{
		name: "lifecycle/Reset-STATE-EPHEMERAL", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go Reset + t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go (STATE wiped: maintenance, same identity)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)

			err := admin.ResetGeneric(t.Context(), &machineapi.ResetRequest{
				Graceful: true, Reboot: true,
				SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{{Label: "STATE", Wipe: true}, {Label: "EPHEMERAL", Wipe: true}},
			})
			if err != nil {
				t.Fatal(err)
			}

			waitStage(t, maintenanceFactory(tg.endpoint), runtime.MachineStageMaintenance)

			cl := maintenanceClient(t, tg.endpoint)

			si, err := safe.StateGetByID[*hardware.SystemInformation](t.Context(), cl.COSI, hardware.SystemInformationID)
			if err != nil {
				t.Fatal(err)
			}

			if si.TypedSpec().UUID != tg.machine.UUID() {
				t.Fatal("identity changed across reset")
			}

			if !tg.machine.Info().Installed {
				t.Fatal("a STATE+EPHEMERAL reset must keep Talos installed")
			}

			// reapplying boots straight to running, without an install
			if _, err := cl.ApplyConfiguration(t.Context(), applyRequest(tg.cluster.controlPlane)); err != nil {
				t.Fatal(err)
			}

			waitStage(t, tg.cluster.adminFactory(tg.endpoint), runtime.MachineStageRunning)

			if n := tg.machine.RPCCounts()["/machine.MachineService/Reset"]; n != 1 {
				t.Fatalf("Reset counted %d times", n)
			}
		},
	},
	{
		name: "lifecycle/Reset-whole-disk", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go Reset (empty system_partitions_to_wipe wipes the system disk)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)

			if err := admin.ResetGeneric(t.Context(), &machineapi.ResetRequest{Graceful: true, Reboot: true}); err != nil {
				t.Fatal(err)
			}

			waitStage(t, maintenanceFactory(tg.endpoint), runtime.MachineStageMaintenance)

			info := tg.machine.Info()
			if info.Installed {
				t.Fatal("Talos still installed after a whole-disk reset")
			}

			cl := maintenanceClient(t, tg.endpoint)

			disks, err := cl.Disks(t.Context())
			if err != nil {
				t.Fatal(err)
			}

			for _, d := range disks.GetMessages()[0].GetDisks() {
				if d.GetSystemDisk() {
					t.Fatalf("system disk still reported: %s", d.GetDeviceName())
				}
			}

			// the next config installs again
			before := tg.machine.Info().Boots

			if _, err := cl.ApplyConfiguration(t.Context(), applyRequest(tg.cluster.controlPlane)); err != nil {
				t.Fatal(err)
			}

			waitStage(t, tg.cluster.adminFactory(tg.endpoint), runtime.MachineStageRunning)

			if after := tg.machine.Info(); !after.Installed || after.Boots != before+1 {
				t.Fatalf("reinstall: installed=%v boots %d->%d", after.Installed, before, after.Boots)
			}
		},
	},
	{
		name: "lifecycle/Reset-no-reboot-powers-off", needs: emulatorOnly,
		cite: "t:internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go (reset with reboot=false powers off)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)

			err := admin.ResetGeneric(t.Context(), &machineapi.ResetRequest{
				Graceful: true, Reboot: false,
				SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{{Label: "STATE", Wipe: true}},
			})
			if err != nil {
				t.Fatal(err)
			}

			testenv.EventuallyOK(t, 10*time.Second, "power off after reset", func() (bool, string) {
				return !tg.machine.Powered(), tg.machine.Info().Stage
			})

			if err := tg.machine.PowerOn(); err != nil {
				t.Fatal(err)
			}

			waitStage(t, maintenanceFactory(tg.endpoint), runtime.MachineStageMaintenance)
		},
	},
	{
		name: "lifecycle/Upgrade-LifecycleService", needs: emulatorOnly,
		cite: "t:internal/app/lifecycle/lifecycle.go (Upgrade writes the new version, no reboot) + t:cmd/talosctl/cmd/talos/upgrade.go (then Reboot)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)
			ctx := t.Context()
			schematic := strings.Repeat("ab", 32)
			image := "factory.talos.dev/metal-installer/" + schematic + ":v1.14.2"

			stream, err := admin.LifecycleClient.Upgrade(ctx, &machineapi.LifecycleServiceUpgradeRequest{
				Source: &machineapi.InstallArtifactsSource{ImageName: image},
			})
			if err != nil {
				t.Fatal(err)
			}

			exit := int32(-1)

			for {
				resp, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}

				if err != nil {
					t.Fatal(err)
				}

				if e, ok := resp.GetProgress().GetResponse().(*machineapi.LifecycleServiceInstallProgress_ExitCode); ok {
					exit = e.ExitCode
				}
			}

			if exit != 0 {
				t.Fatalf("exit code %d", exit)
			}

			if v := version(t, admin); v != talosemu.DefaultTalosVersion {
				t.Fatalf("version changed to %s before the reboot", v)
			}

			if err := admin.Reboot(ctx); err != nil {
				t.Fatal(err)
			}

			testenv.EventuallyOK(t, 20*time.Second, "v1.14.2 after reboot", func() (bool, string) {
				cl, err := tg.cluster.adminFactory(tg.endpoint)()
				if err != nil {
					return false, err.Error()
				}
				defer cl.Close() //nolint:errcheck

				v := versionOrErr(cl)

				return v == "v1.14.2", v
			})

			cl := tg.admin(t)

			sch, err := safe.StateGetByID[*runtime.ImageFactorySchematic](ctx, cl.COSI, runtime.ImageFactorySchematicID)
			if err != nil {
				t.Fatal(err)
			}

			if sch.TypedSpec().SchematicID != schematic {
				t.Fatalf("schematic %q, want %q", sch.TypedSpec().SchematicID, schematic)
			}

			if info := tg.machine.Info(); info.Slot != "B" {
				t.Fatalf("slot %q after upgrade, want B", info.Slot)
			}
		},
	},
	{
		name: "lifecycle/Upgrade-legacy-and-fallback", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go Upgrade (ack, then upgrade + reboot; A/B fallback on a failed boot)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)
			ctx := t.Context()

			// fail the first upgrade: the machine falls back to the old slot
			if code := control(t, tg.world, "POST", "/machines/"+tg.machine.Name()+"/fail-next-upgrade", "", nil); code != 200 {
				t.Fatalf("fail-next-upgrade: %d", code)
			}

			boots := tg.machine.Info().Boots

			resp, err := admin.MachineClient.Upgrade( //nolint:staticcheck // the legacy RPC is what is tested
				ctx, &machineapi.UpgradeRequest{Image: "ghcr.io/siderolabs/installer:v1.14.3"})
			if err != nil {
				t.Fatal(err)
			}

			if resp.GetMessages()[0].GetAck() != "Upgrade request received" {
				t.Fatalf("ack %q", resp.GetMessages()[0].GetAck())
			}

			testenv.EventuallyOK(t, 20*time.Second, "reboot after the failed upgrade", func() (bool, string) {
				i := tg.machine.Info()

				return i.Boots > boots && i.Stage == "running", i.Stage
			})

			if info := tg.machine.Info(); info.Version != talosemu.DefaultTalosVersion || !info.LastUpgradeFailed || info.Slot != "A" {
				t.Fatalf("after failed upgrade: version %s failed=%v slot %s", info.Version, info.LastUpgradeFailed, info.Slot)
			}

			cl := tg.admin(t)
			if v := version(t, cl); v != talosemu.DefaultTalosVersion {
				t.Fatalf("Version reports %s after fallback", v)
			}

			// the next one succeeds
			if _, err := cl.MachineClient.Upgrade( //nolint:staticcheck // the legacy RPC is what is tested
				ctx, &machineapi.UpgradeRequest{Image: "ghcr.io/siderolabs/installer:v1.14.3"}); err != nil {
				t.Fatal(err)
			}

			testenv.EventuallyOK(t, 20*time.Second, "v1.14.3", func() (bool, string) {
				i := tg.machine.Info()

				return i.Version == "v1.14.3" && i.Stage == "running", i.Version + " " + i.Stage
			})

			_, err = tg.admin(t).MachineClient.Upgrade( //nolint:staticcheck // the legacy RPC is what is tested
				ctx, &machineapi.UpgradeRequest{Image: "ghcr.io/siderolabs/installer:latest"})
			if err == nil || !strings.Contains(err.Error(), "error validating installer image") {
				t.Fatalf("want image validation error, got %v", err)
			}
		},
	},
	{
		name: "logs/Logs-Dmesg-Hostname", needs: needsConfigured,
		cite: "t:…/v1alpha1_server.go Logs, Dmesg (facility: priority: [time]: message), Hostname",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)
			ctx := t.Context()

			dm, err := admin.Dmesg(ctx, false, false)
			if err != nil {
				t.Fatal(err)
			}

			text := readStream(t, dm)
			if !strings.Contains(text, "kern:") || !strings.Contains(text, "]: ") {
				t.Fatalf("dmesg output not in Talos's format: %q", firstLines(text, 3))
			}

			logs, err := admin.Logs(ctx, "system", 0, "machined", false, 5)
			if err != nil {
				t.Fatal(err)
			}

			text = readStream(t, logs)
			if n := strings.Count(strings.TrimSpace(text), "\n") + 1; text == "" || n > 5 {
				t.Fatalf("want 1..5 lines with tail_lines=5, got %d: %q", n, text)
			}

			resp, err := admin.MachineClient.Hostname(ctx, &emptypb.Empty{})
			if err != nil {
				t.Fatal(err)
			}

			if resp.GetMessages()[0].GetHostname() == "" {
				t.Fatal("empty hostname")
			}

			if tg.machine == nil {
				return
			}

			// follow keeps streaming after the initial lines
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()

			follow, err := admin.Dmesg(fctx, true, false)
			if err != nil {
				t.Fatal(err)
			}

			for {
				msg, err := follow.Recv()
				if err != nil {
					t.Fatalf("follow ended before a new line: %v", err)
				}

				if strings.Contains(string(msg.GetBytes()), "talosemu: tick") {
					break
				}
			}
		},
	},
}

// wantWrapped checks a gRPC error that the COSI client adapter wrapped into a plain error.
func wantWrapped(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()

	if err == nil {
		t.Fatalf("want %s error, got success", code)
	}

	if want := "code = " + code.String() + " desc = " + msg; !strings.Contains(err.Error(), want) {
		t.Fatalf("want error containing %q, got %v", want, err)
	}
}

func mustStage(t *testing.T, cl *client.Client) runtime.MachineStage {
	t.Helper()

	ms, err := safe.StateGetByID[*runtime.MachineStatus](t.Context(), cl.COSI, runtime.MachineStatusID)
	if err != nil {
		t.Fatal(err)
	}

	return ms.TypedSpec().Stage
}

func hostname(t *testing.T, cl *client.Client) string {
	t.Helper()

	resp, err := cl.MachineClient.Hostname(t.Context(), &emptypb.Empty{})
	if err != nil {
		t.Fatal(err)
	}

	return resp.GetMessages()[0].GetHostname()
}

func version(t *testing.T, cl *client.Client) string {
	t.Helper()

	resp, err := cl.Version(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	return resp.GetMessages()[0].GetVersion().GetTag()
}

func versionOrErr(cl *client.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	resp, err := cl.Version(ctx)
	if err != nil {
		return err.Error()
	}

	return resp.GetMessages()[0].GetVersion().GetTag()
}

// withHostname replaces the HostnameConfig's automatic hostname with a fixed one.
func withHostname(cfg []byte, name string) []byte {
	return bytes.Replace(cfg, []byte("kind: HostnameConfig\nauto: stable"), []byte("kind: HostnameConfig\nhostname: "+name), 1)
}

func readStream(t *testing.T, stream client.MachineStream) string {
	t.Helper()

	rd, err := client.ReadStream(stream)
	if err != nil {
		t.Fatal(err)
	}

	defer rd.Close() //nolint:errcheck

	b, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}

	return string(b)
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}

	return strings.Join(lines, "\n")
}

// issueClientCert signs a client certificate with the cluster's OS CA and the given
// ExtKeyUsage.
func issueClientCert(t *testing.T, c *cluster, eku []stdx509.ExtKeyUsage, org string) *x509.PEMEncodedCertificateAndKey {
	t.Helper()

	caCert, err := c.bundle.Certs.OS.GetCert()
	if err != nil {
		t.Fatal(err)
	}

	caKey, err := c.bundle.Certs.OS.GetKey()
	if err != nil {
		t.Fatal(err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	tmpl := &stdx509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{Organization: []string{org}, CommonName: "test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     stdx509.KeyUsageDigitalSignature,
		ExtKeyUsage:  eku,
	}

	der, err := stdx509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}

	keyDER, err := stdx509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}

	return &x509.PEMEncodedCertificateAndKey{
		Crt: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

// TestConformance runs every check against an emulated machine, and against a real Talos node
// when TALOS_CONFORMANCE_ENDPOINT (configured node + talosconfig) or
// TALOS_CONFORMANCE_MAINTENANCE (node in maintenance) is set.
func TestConformance(t *testing.T) {
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Logf("checks: %s", c.cite)

			t.Run("emulator", func(t *testing.T) {
				t.Parallel()
				runEmulated(t, c)
			})

			t.Run("real", func(t *testing.T) {
				runReal(t, c)
			})
		})
	}
}

func runEmulated(t *testing.T, c check) {
	n := 1
	if c.worker {
		n = 2
	}

	spec := testSpec(n)
	spec.Machines[0].Disks = []talosemu.DiskSpec{{Type: talosemu.DiskNVMe}, {Type: talosemu.DiskVirtio, Size: "20GiB"}}

	w := startWorld(t, spec, "")
	m := w.Machines()[0]
	cl := getCluster(t)

	tg := &target{
		endpoint: m.IP(), world: w, machine: m, cluster: cl,
		admin: func(t *testing.T) *client.Client { return cl.admin(t, m.IP()) },
	}

	waitStage(t, maintenanceFactory(m.IP()), runtime.MachineStageMaintenance)

	// maintenance/ and apply/ checks start in maintenance; the rest on a provisioned machine
	if !strings.HasPrefix(c.name, "maintenance/") && !strings.HasPrefix(c.name, "apply/") {
		if c.worker {
			// a worker gets its API certificate from a control plane's trustd, so the world
			// needs a provisioned control plane first
			provision(t, cl, w.Machines()[1], cl.controlPlane)
			provision(t, cl, m, cl.worker)
		} else {
			provision(t, cl, m, cl.controlPlane)
		}
	}

	c.run(t, tg)
}

func runReal(t *testing.T, c check) {
	switch c.needs {
	case emulatorOnly:
		t.Skip("real-node variant skipped: this check changes the node or needs the emulator's control API or the cluster CA key")
	case needsMaintenance:
		ep := os.Getenv(envMaintenance)
		if ep == "" {
			t.Skipf("real-node variant skipped: set %s to a Talos node in maintenance mode to run it", envMaintenance)
		}

		c.run(t, &target{endpoint: ep})
	case needsConfigured:
		ep := realEndpoint(t)
		path := os.Getenv(envTalosconfig)

		if path == "" {
			path = os.Getenv("TALOSCONFIG")
		}

		cfg, err := clientconfig.Open(path)
		if err != nil {
			t.Fatalf("%s: %v", envTalosconfig, err)
		}

		c.run(t, &target{endpoint: ep, admin: func(t *testing.T) *client.Client {
			cl, err := client.New(t.Context(), client.WithConfig(cfg), client.WithEndpoints(ep))
			if err != nil {
				t.Fatal(err)
			}

			t.Cleanup(func() { _ = cl.Close() })

			return cl
		}})
	}
}
