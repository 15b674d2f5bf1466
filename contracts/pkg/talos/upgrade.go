package talos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Running is what a node runs: its Talos version and Image Factory schematic.
type Running struct {
	// Version is the running Talos version (COSI runtime.Version), e.g. v1.14.1.
	Version string
	// Schematic is the running schematic ID (COSI ImageFactorySchematic);
	// "" when the node reports none.
	Schematic string
}

// Running reads the node's running Talos version and schematic.
func (n *Node) Running(ctx context.Context) (Running, error) {
	v, err := safe.StateGetByID[*runtime.Version](ctx, n.c.COSI, "version")
	if err != nil {
		return Running{}, fmt.Errorf("read the running Talos version: %w", err)
	}

	out := Running{Version: v.TypedSpec().Version}

	s, err := safe.StateGetByID[*runtime.ImageFactorySchematic](ctx, n.c.COSI, runtime.ImageFactorySchematicID)

	switch {
	case err == nil:
		out.Schematic = s.TypedSpec().SchematicID
	case !state.IsNotFoundError(err):
		return Running{}, fmt.Errorf("read the running schematic: %w", err)
	}

	return out, nil
}

// BootID reads the node's boot ID (/proc/sys/kernel/random/boot_id), which
// changes on every boot: how talosctl's --wait knows a node rebooted
// (t:cmd/talosctl/pkg/talos/action/tracker.go, BootIDChangedPostCheckFn).
func (n *Node) BootID(ctx context.Context) (string, error) {
	r, err := n.c.Read(ctx, "/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read the boot ID: %w", err)
	}
	defer r.Close() //nolint:errcheck // a read-only stream

	b, err := io.ReadAll(io.LimitReader(r, 256))
	if err != nil {
		return "", fmt.Errorf("read the boot ID: %w", err)
	}

	return strings.TrimSpace(string(b)), nil
}

// UpgradeResult is how an Upgrade was sent.
type UpgradeResult struct {
	// Legacy is true when the node answered LifecycleService.Upgrade with
	// Unimplemented and the legacy MachineService.Upgrade was sent instead:
	// that one reboots the node by itself (its sequence cordons and drains
	// first), so the caller sends no Reboot.
	Legacy bool
}

// ErrUpgradeFailed wraps an installer that ran and exited non-zero.
var ErrUpgradeFailed = errors.New("the installer failed")

// Upgrade installs the Talos of installer image into the node's inactive
// boot slot with LifecycleService.Upgrade, which does not reboot ("the reboot
// comes as a separate API call", t:internal/app/lifecycle/lifecycle.go); the
// caller drains the node and sends Reboot afterwards, as talosctl does
// (t:cmd/talosctl/cmd/talos/upgrade.go, upgradeViaLifecycleService). A node
// whose API answers Unimplemented (a Talos older than the LifecycleService,
// which talosctl recognises by its version range ">1.13.0-alpha.2 <2.0.0")
// gets the legacy MachineService.Upgrade, deprecated and going away in Talos
// 1.18, with no other option set (Preserve, Stage and Force are ignored by
// the new installer and deprecated in the same file).
func (v *Verified) Upgrade(ctx context.Context, image string) (UpgradeResult, error) {
	stream, err := v.c.LifecycleClient.Upgrade(ctx, &machine.LifecycleServiceUpgradeRequest{
		Source: &machine.InstallArtifactsSource{ImageName: image},
	})
	if err == nil {
		err = followUpgrade(stream)
	}

	if status.Code(err) == codes.Unimplemented {
		//nolint:staticcheck // the legacy path, only for nodes without the LifecycleService
		if _, lerr := v.c.UpgradeWithOptions(ctx, legacyUpgrade(image)...); lerr != nil {
			return UpgradeResult{Legacy: true}, fmt.Errorf("upgrade (legacy MachineService.Upgrade): %w", lerr)
		}

		return UpgradeResult{Legacy: true}, nil
	}

	if err != nil {
		return UpgradeResult{}, fmt.Errorf("upgrade: %w", err)
	}

	return UpgradeResult{}, nil
}

// followUpgrade reads the installer's progress until its exit code.
func followUpgrade(stream interface {
	Recv() (*machine.LifecycleServiceUpgradeResponse, error)
},
) error {
	var last string

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return errors.New("the node ended the upgrade without an exit code")
		}

		if err != nil {
			return err
		}

		switch r := msg.GetProgress().GetResponse().(type) {
		case *machine.LifecycleServiceInstallProgress_Message:
			last = r.Message
		case *machine.LifecycleServiceInstallProgress_ExitCode:
			if r.ExitCode != 0 {
				return fmt.Errorf("%w with exit code %d: %s", ErrUpgradeFailed, r.ExitCode, last)
			}

			return nil
		}
	}
}

func legacyUpgrade(image string) []talosclient.UpgradeOption {
	return []talosclient.UpgradeOption{talosclient.WithUpgradeImage(image)}
}
