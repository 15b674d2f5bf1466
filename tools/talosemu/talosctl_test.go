package talosemu_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/maeshinshin/ichor/tools/talosemu"
)

// talosctlBinary is the real talosctl that `go tool task tools:talosctl` builds (the Taskfile
// exports its path as TALOSCTL).
func talosctlBinary(t *testing.T) string {
	t.Helper()

	path := os.Getenv("TALOSCTL")
	if path == "" {
		home, _ := os.UserHomeDir()
		path = filepath.Join(home, ".cache", "ichor", "bin", "talosctl-v1.14.1")

		if _, err := os.Stat(path); err != nil {
			t.Skipf("the real talosctl is not built (%s): run `go tool task tools:talosctl`, or set TALOSCTL", path)
		}
	}

	if _, err := os.Stat(path); err != nil {
		t.Fatalf("TALOSCTL=%s: %v (build it with `go tool task tools:talosctl`)", path, err)
	}

	return path
}

// talosctlWorld is the emulated cluster the talosctl table runs against.
type talosctlWorld struct {
	w                *talosemu.World
	cp, w1, w2, mnt  *talosemu.Machine
	talosconfig, bin string
	cpBoots          int
}

type talosctlCase struct {
	name string
	// args, with CP, W1, W2 and MAINT replaced by the machines' addresses
	args []string
	// before runs first (faults, snapshots)
	before func(t *testing.T, tw *talosctlWorld)
	// wantErr: talosctl exits non-zero
	wantErr bool
	// want: substrings of stdout+stderr; check: anything else Talos would show
	want  []string
	check func(t *testing.T, tw *talosctlWorld, out string)
}

// talosctlCases is what Ichor's users and Ichor itself do with talosctl, each with what a real
// Talos v1.14.1 node answers. Grow it with each surface Ichor uses.
var talosctlCases = []talosctlCase{
	// maintenance: talosctl dials the node itself, pinning nothing (--insecure)
	{name: "maintenance version", args: []string{"-n", "MAINT", "version", "--insecure"}, want: []string{"Tag:", "v1.14.1"}},
	{name: "maintenance get disks", args: []string{"-n", "MAINT", "get", "disks", "--insecure"}, want: []string{"nvme0n1"}},
	{name: "maintenance get machinestatus", args: []string{"-n", "MAINT", "get", "machinestatus", "--insecure"}, want: []string{"maintenance"}},
	// configured, direct
	{name: "configured version direct", args: []string{"-e", "CP", "-n", "CP", "version"}, want: []string{"NODE:", "CP", "Tag:"}},
	{name: "configured services direct", args: []string{"-e", "CP", "-n", "CP", "services"}, want: []string{"apid", "Running", "trustd"}},
	// through an endpoint: the answer is the named node's
	{
		name: "get machinestatus through the endpoint", args: []string{"-e", "CP", "-n", "W1", "get", "machinestatus"},
		want: []string{"W1", "running"},
	},
	{
		name: "read the worker's boot ID through the endpoint", args: []string{"-e", "CP", "-n", "W1", "read", "/proc/sys/kernel/random/boot_id"},
		check: func(t *testing.T, tw *talosctlWorld, out string) {
			if strings.TrimSpace(out) != tw.w1.Info().BootID {
				t.Errorf("boot ID %q, want the worker's %q (the endpoint's is %q)", strings.TrimSpace(out), tw.w1.Info().BootID, tw.cp.Info().BootID)
			}
		},
	},
	{
		name: "worker services through the endpoint", args: []string{"-e", "CP", "-n", "W1", "services"},
		want: []string{"kubelet"},
		check: func(t *testing.T, _ *talosctlWorld, out string) {
			if strings.Contains(out, "trustd") {
				t.Error("a worker's services list trustd: the endpoint answered instead of the worker")
			}
		},
	},
	// many nodes
	{name: "version of many nodes", args: []string{"-e", "CP", "-n", "CP,W1,W2", "version"}, want: []string{"NODE:", "CP", "W1", "W2"}},
	{
		name: "many nodes, one powered off", args: []string{"-e", "CP", "-n", "W1,W2", "version"},
		before: func(t *testing.T, tw *talosctlWorld) {
			if err := tw.w2.PowerOff(); err != nil {
				t.Fatal(err)
			}
		},
		wantErr: true, want: []string{"W1", "W2"},
		check: func(t *testing.T, tw *talosctlWorld, _ string) {
			if err := tw.w2.PowerOn(); err != nil {
				t.Fatal(err)
			}

			waitStage(t, getCluster(t).adminFactory(tw.w2.IP()), runtime.MachineStageRunning)
		},
	},
	// refusals
	{name: "a worker endpoint forwards nothing", args: []string{"-e", "W1", "-n", "CP", "version"}, wantErr: true, want: []string{"no request forwarding"}},
	// lifecycle through the endpoint: it acts on the named node, not on the endpoint
	{
		name: "upgrade --wait of a worker through the control plane",
		args: []string{
			"-e", "CP", "-n", "W1", "upgrade", "--image", "ghcr.io/siderolabs/installer:v1.14.2",
			"--wait", "--drain=false", "--timeout", "2m",
		},
		check: func(t *testing.T, tw *talosctlWorld, out string) {
			if v := tw.w1.Info().Version; v != "v1.14.2" {
				t.Errorf("worker version after upgrade --wait: %s, want v1.14.2 (output %s)", v, out)
			}

			if info := tw.cp.Info(); info.Version != "v1.14.1" || info.Boots != tw.cpBoots {
				t.Errorf("the endpoint changed: version %s, boots %d→%d", info.Version, tw.cpBoots, info.Boots)
			}
		},
	},
	{
		name: "reboot --wait of a worker through the control plane",
		args: []string{"-e", "CP", "-n", "W1", "reboot", "--wait", "--timeout", "2m"},
		before: func(t *testing.T, tw *talosctlWorld) {
			t.Setenv("W1_BOOT", tw.w1.Info().BootID)
		},
		check: func(t *testing.T, tw *talosctlWorld, _ string) {
			if tw.w1.Info().BootID == os.Getenv("W1_BOOT") {
				t.Error("reboot --wait returned before the worker rebooted")
			}

			if tw.cp.Info().Boots != tw.cpBoots {
				t.Error("the endpoint rebooted")
			}
		},
	},
	{
		name: "reset --wait of a worker through the control plane",
		args: []string{
			"-e", "CP", "-n", "W2", "reset", "--graceful=false", "--reboot",
			"--system-labels-to-wipe", "STATE", "--wait", "--timeout", "2m",
		},
		check: func(t *testing.T, tw *talosctlWorld, _ string) {
			if !tw.w2.Info().Maintenance {
				t.Errorf("the worker is not in maintenance after reset --wait: %+v", tw.w2.Info())
			}

			if tw.cp.Info().Maintenance || tw.cp.Info().Boots != tw.cpBoots {
				t.Error("the endpoint was reset")
			}
		},
	},
}

// TestTalosctlConformance runs the real talosctl v1.14.1 against emulated machines: one
// control plane (the endpoint), two workers, one machine in maintenance.
func TestTalosctlConformance(t *testing.T) {
	bin := talosctlBinary(t)

	w := startWorld(t, testSpec(4), "")
	c := getCluster(t)

	tw := &talosctlWorld{w: w, cp: w.Machines()[0], w1: w.Machines()[1], w2: w.Machines()[2], mnt: w.Machines()[3], bin: bin}

	provision(t, c, tw.cp, c.controlPlane)
	provision(t, c, tw.w1, c.worker)
	provision(t, c, tw.w2, c.worker)
	waitStage(t, maintenanceFactory(tw.mnt.IP()), runtime.MachineStageMaintenance)

	tw.cpBoots = tw.cp.Info().Boots
	tw.talosconfig = filepath.Join(t.TempDir(), "talosconfig")

	if err := c.talosconfig.Save(tw.talosconfig); err != nil {
		t.Fatal(err)
	}

	replacer := strings.NewReplacer("MAINT", tw.mnt.IP(), "CP", tw.cp.IP(), "W1", tw.w1.IP(), "W2", tw.w2.IP())

	for _, tc := range talosctlCases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before(t, tw)
			}

			args := append([]string{"--talosconfig", tw.talosconfig}, tc.args...)
			for i := range args {
				args[i] = replacer.Replace(args[i])
			}

			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()

			var out bytes.Buffer

			cmd := exec.CommandContext(ctx, tw.bin, args...) //nolint:gosec // the talosctl under test, with the table's arguments
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.Env = append(os.Environ(), "TALOSCONFIG="+tw.talosconfig)
			err := cmd.Run()

			t.Logf("talosctl %s\n%s", strings.Join(args[2:], " "), out.String())

			if tc.wantErr != (err != nil) {
				t.Fatalf("talosctl exit: %v, want error %v", err, tc.wantErr)
			}

			for _, want := range tc.want {
				if w := replacer.Replace(want); !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q", w)
				}
			}

			if tc.check != nil {
				tc.check(t, tw, out.String())
			}
		})
	}
}
