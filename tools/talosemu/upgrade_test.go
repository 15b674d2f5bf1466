package talosemu_test

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/maeshinshin/ichor/tools/talosemu"
)

// TestReleaseSource: the world serves the Image Factory's GET /versions, and
// an Upgrade to an installer tag the release source does not offer fails as
// the pull of a missing image does (LifecycleService: Internal "upgrade
// failed"; legacy: an error before anything happens), staging nothing; a
// released tag is accepted (the allowed neighbour).
func TestReleaseSource(t *testing.T) {
	w := startWorld(t, testSpec(1), "")
	m := w.Machines()[0]
	cl := getCluster(t)

	var vs []string
	if code := control(t, w, http.MethodGet, "/versions", "", &vs); code != http.StatusOK || !slices.Equal(vs, talosemu.DefaultReleases) {
		t.Fatalf("GET /versions = %d %v", code, vs)
	}

	if code := control(t, w, http.MethodPut, "/versions", `["v1.14.1","v1.14.4"]`, &vs); code != http.StatusOK || !slices.Equal(w.Releases(), []string{"v1.14.1", "v1.14.4"}) {
		t.Fatalf("PUT /versions = %d %v", code, w.Releases())
	}

	waitStage(t, maintenanceFactory(m.IP()), runtime.MachineStageMaintenance)
	provision(t, cl, m, cl.controlPlane)

	admin := cl.admin(t, m.IP())
	upgrade := func(image string) error {
		stream, err := admin.LifecycleClient.Upgrade(t.Context(), &machineapi.LifecycleServiceUpgradeRequest{
			Source: &machineapi.InstallArtifactsSource{ImageName: image},
		})
		if err != nil {
			return err
		}

		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}

			if err != nil {
				return err
			}

			if e, ok := resp.GetProgress().GetResponse().(*machineapi.LifecycleServiceInstallProgress_ExitCode); ok && e.ExitCode != 0 {
				return errors.New("exit code")
			}
		}
	}

	err := upgrade("ghcr.io/siderolabs/installer:v1.14.2")
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("an unreleased tag: %v", err)
	}

	//nolint:staticcheck // the legacy RPC checks the image too
	if _, err := admin.MachineClient.Upgrade(t.Context(), &machineapi.UpgradeRequest{Image: "ghcr.io/siderolabs/installer:v1.14.2"}); err == nil ||
		!strings.Contains(err.Error(), "not found") {
		t.Fatalf("legacy, an unreleased tag: %v", err)
	}

	if info := m.Info(); info.PendingVersion != "" {
		t.Fatalf("a refused upgrade staged %s", info.PendingVersion)
	}

	if err := upgrade("ghcr.io/siderolabs/installer:v1.14.4"); err != nil {
		t.Fatalf("a released tag: %v", err)
	}

	if info := m.Info(); info.PendingVersion != "v1.14.4" || info.Version != talosemu.DefaultTalosVersion {
		t.Fatalf("after the upgrade: pending %q running %q", info.PendingVersion, info.Version)
	}
}
