package talosemu_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/maeshinshin/ichor/tools/talosemu"
)

func TestControlAPI(t *testing.T) {
	w := startWorld(t, testSpec(3), "")
	m := w.Machines()[1]

	waitStage(t, maintenanceFactory(m.IP()), runtime.MachineStageMaintenance)

	t.Run("list", func(t *testing.T) {
		var list []talosemu.MachineInfo
		if code := control(t, w, http.MethodGet, "/machines", "", &list); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}

		if len(list) != 3 || list[1].Name != m.Name() || list[1].Endpoint != m.Address() || list[1].UUID != m.UUID() {
			t.Fatalf("list %+v", list)
		}

		if list[1].MaintenanceFingerprint == "" || len(list[1].MACs) != 1 || !list[1].Powered || list[1].Stage != "maintenance" {
			t.Fatalf("machine info %+v", list[1])
		}
	})

	t.Run("unknown machine", func(t *testing.T) {
		var out map[string]string
		if code := control(t, w, http.MethodPost, "/machines/nope/power-off", "", &out); code != http.StatusNotFound {
			t.Fatalf("status %d", code)
		}

		if !strings.Contains(out["error"], `unknown machine "nope"`) {
			t.Fatalf("error %q", out["error"])
		}
	})

	t.Run("unknown route", func(t *testing.T) {
		var out map[string]string
		if code := control(t, w, http.MethodPost, "/machines/"+m.Name()+"/explode", "", &out); code != http.StatusNotFound {
			t.Fatalf("status %d", code)
		}

		if !strings.Contains(out["error"], "no control API route") {
			t.Fatalf("error %q", out["error"])
		}
	})

	t.Run("malformed body", func(t *testing.T) {
		var out map[string]string
		if code := control(t, w, http.MethodPut, "/durations", `{"install": 5}`, &out); code != http.StatusBadRequest {
			t.Fatalf("status %d", code)
		}

		if !strings.Contains(out["error"], "malformed JSON body") {
			t.Fatalf("error %q", out["error"])
		}
	})

	t.Run("durations", func(t *testing.T) {
		var d talosemu.Durations
		if code := control(t, w, http.MethodPut, "/machines/"+m.Name()+"/durations", `{"install": "3s", "apply": "250ms"}`, nil); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}

		if code := control(t, w, http.MethodGet, "/durations", "", &d); code != http.StatusOK || d.Install.D() != 100*time.Millisecond {
			t.Fatalf("world durations changed: %d %+v", code, d)
		}

		if info := m.Info(); info.Durations.Install.D() != 3*time.Second || info.Durations.Apply.D() != 250*time.Millisecond {
			t.Fatalf("machine durations %+v", info.Durations)
		}
	})

	t.Run("replace maintenance cert", func(t *testing.T) {
		old := m.MaintenanceFingerprint()

		var out map[string]string
		if code := control(t, w, http.MethodPost, "/machines/"+m.Name()+"/replace-maintenance-cert", "", &out); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}

		if out["fingerprint"] == "" || out["fingerprint"] == old {
			t.Fatalf("fingerprint %q (old %q)", out["fingerprint"], old)
		}

		if _, err := maintenanceClient(t, m.IP(), old).Version(t.Context()); err == nil {
			t.Fatal("old fingerprint still accepted")
		}

		if _, err := maintenanceClient(t, m.IP(), out["fingerprint"]).Version(t.Context()); err != nil {
			t.Fatalf("new fingerprint rejected: %v", err)
		}
	})

	t.Run("rpc counts", func(t *testing.T) {
		if code := control(t, w, http.MethodDelete, "/machines/"+m.Name()+"/rpcs", "", nil); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}

		cl := maintenanceClient(t, m.IP())

		for range 3 {
			if _, err := cl.Version(t.Context()); err != nil {
				t.Fatal(err)
			}
		}

		_ = cl.Reboot(t.Context()) // denied, but counted

		var counts map[string]int
		control(t, w, http.MethodGet, "/machines/"+m.Name()+"/rpcs", "", &counts)

		if counts["/machine.MachineService/Version"] != 3 || counts["/machine.MachineService/Reboot"] != 1 {
			t.Fatalf("counts %v", counts)
		}
	})

	t.Run("power off and on", func(t *testing.T) {
		if code := control(t, w, http.MethodPost, "/machines/"+m.Name()+"/power-off", "", nil); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}

		d := net.Dialer{Timeout: time.Second}
		if c, err := d.DialContext(t.Context(), "tcp", m.Address()); err == nil {
			_ = c.Close()

			t.Fatal("a powered-off machine accepts TCP")
		}

		boots := m.Info().Boots

		if code := control(t, w, http.MethodPost, "/machines/"+m.Name()+"/power-on", "", nil); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}

		waitStage(t, maintenanceFactory(m.IP()), runtime.MachineStageMaintenance)

		if m.Info().Boots != boots+1 {
			t.Fatal("power-on did not boot")
		}
	})

	t.Run("hang", func(t *testing.T) {
		if code := control(t, w, http.MethodPost, "/machines/"+m.Name()+"/hang", "", nil); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}

		// TCP connects, the TLS handshake never completes
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(t.Context(), "tcp", m.Address())
		if err != nil {
			t.Fatalf("hung machine refused TCP: %v", err)
		}

		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // probing a hang

		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()

		if err := tc.HandshakeContext(ctx); err == nil {
			t.Fatal("hung machine completed a TLS handshake")
		}

		_ = c.Close()

		cctx, ccancel := context.WithTimeout(t.Context(), time.Second)
		defer ccancel()

		if _, err := maintenanceClient(t, m.IP()).Version(cctx); err == nil {
			t.Fatal("hung machine answered Version")
		}

		if code := control(t, w, http.MethodPost, "/machines/"+m.Name()+"/unhang", "", nil); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}

		if _, err := maintenanceClient(t, m.IP()).Version(t.Context()); err != nil {
			t.Fatalf("after unhang: %v", err)
		}
	})

	t.Run("wipe disk", func(t *testing.T) {
		c := getCluster(t)
		other := w.Machines()[2]

		provision(t, c, other, c.controlPlane)

		if code := control(t, w, http.MethodPost, "/machines/"+other.Name()+"/wipe-disk", "", nil); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}

		// the wipe shows at the next boot
		if code := control(t, w, http.MethodPost, "/machines/"+other.Name()+"/power-off", "", nil); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}

		if code := control(t, w, http.MethodPost, "/machines/"+other.Name()+"/power-on", "", nil); code != http.StatusOK {
			t.Fatalf("status %d", code)
		}

		waitStage(t, maintenanceFactory(other.IP()), runtime.MachineStageMaintenance)

		if other.Info().Installed {
			t.Fatal("still installed after a disk wipe")
		}
	})
}

// TestRestartKeepsState restarts the emulator on the same state directory: identity, stage,
// config, version, certificates and the maintenance fingerprint survive.
func TestRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	spec := testSpec(2)
	c := getCluster(t)

	w, err := talosemu.Start(t.Context(), spec, dir)
	if err != nil {
		t.Fatal(err)
	}

	configured, fresh := w.Machines()[0], w.Machines()[1]
	provision(t, c, configured, c.controlPlane)

	before := configured.Info()
	freshFP := fresh.MaintenanceFingerprint()

	if before.MachineType != "controlplane" {
		t.Fatalf("machine type %q", before.MachineType)
	}

	off := w.Machines()[1]
	if err := off.PowerOff(); err != nil {
		t.Fatal(err)
	}

	w.Close()

	w2 := startWorld(t, spec, dir)
	configured2, fresh2 := w2.Machines()[0], w2.Machines()[1]

	waitStage(t, c.adminFactory(configured2.IP()), runtime.MachineStageRunning)

	after := configured2.Info()
	if after.UUID != before.UUID || after.Version != before.Version || !after.Installed || after.BootID == before.BootID {
		t.Fatalf("before %+v\nafter %+v", before, after)
	}

	admin := c.admin(t, configured2.IP())

	si, err := safe.StateGetByID[*hardware.SystemInformation](t.Context(), admin.COSI, hardware.SystemInformationID)
	if err != nil {
		t.Fatal(err)
	}

	if si.TypedSpec().UUID != before.UUID {
		t.Fatalf("uuid %q after restart", si.TypedSpec().UUID)
	}

	if fresh2.MaintenanceFingerprint() != freshFP {
		t.Fatal("maintenance fingerprint changed across a restart")
	}

	// the machine powered off before the restart stays off
	if fresh2.Powered() {
		t.Fatal("a powered-off machine came back on after a restart")
	}

	if err := fresh2.PowerOn(); err != nil {
		t.Fatal(err)
	}

	waitStage(t, maintenanceFactory(fresh2.IP()), runtime.MachineStageMaintenance)

	if _, err := maintenanceClient(t, fresh2.IP(), freshFP).Version(t.Context()); err != nil {
		t.Fatalf("pinned maintenance client after restart: %v", err)
	}
}

// TestWrongTLSMode: a talosconfig client against a maintenance node fails to verify the
// self-signed certificate, as against a real node in maintenance.
func TestWrongTLSMode(t *testing.T) {
	w := startWorld(t, testSpec(1), "")
	m := w.Machines()[0]
	c := getCluster(t)

	waitStage(t, maintenanceFactory(m.IP()), runtime.MachineStageMaintenance)

	_, err := c.admin(t, m.IP()).Version(t.Context())
	if err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("want an unknown-authority error, got %v", err)
	}
}

// TestRestartMidInstall stops the emulator while a machine installs; after the restart the
// install runs again and the machine ends up running.
func TestRestartMidInstall(t *testing.T) {
	dir := t.TempDir()
	spec := testSpec(1)
	spec.Durations.Install = talosemu.Duration(time.Minute)
	c := getCluster(t)

	w, err := talosemu.Start(t.Context(), spec, dir)
	if err != nil {
		t.Fatal(err)
	}

	m := w.Machines()[0]
	waitStage(t, maintenanceFactory(m.IP()), runtime.MachineStageMaintenance)

	if _, err := maintenanceClient(t, m.IP()).ApplyConfiguration(t.Context(), applyRequest(c.controlPlane)); err != nil {
		t.Fatal(err)
	}

	waitStage(t, c.adminFactory(m.IP()), runtime.MachineStageInstalling)
	w.Close()

	spec.Durations = fastDurations()
	w2 := startWorld(t, spec, dir)

	waitStage(t, c.adminFactory(w2.Machines()[0].IP()), runtime.MachineStageRunning)

	if !w2.Machines()[0].Info().Installed {
		t.Fatal("running but not installed")
	}
}
