package talosemu_test

import (
	"context"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/maeshinshin/ichor/tools/talosemu"
)

// TestMakeTalosctlCluster makes a cluster the way talosctl does (machinery's
// generate, apply in maintenance mode, bootstrap) and reads it back with the
// generated talosconfig: both machines run, etcd has one member, and the
// control plane's configuration carries the inline Cilium manifest with
// Talos's CNI off.
func TestMakeTalosctlCluster(t *testing.T) {
	w := startWorld(t, testSpec(2), "")
	cp, wk := w.Machines()[0], w.Machines()[1]

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	res, err := talosemu.MakeTalosctlCluster(ctx, talosemu.TalosctlCluster{
		Name: "theirs", ControlPlanes: []*talosemu.Machine{cp}, Workers: []*talosemu.Machine{wk},
		CNI: talosemu.TalosctlCNINone, InlineManifests: []talosemu.InlineManifest{talosemu.CiliumInlineManifest("kubernetes")},
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, m := range []*talosemu.Machine{cp, wk} {
		if m.Stage() != runtime.MachineStageRunning {
			t.Errorf("%s: stage %s", m.Name(), m.Stage())
		}
	}

	tc, err := clientconfig.FromBytes(res.Talosconfig)
	if err != nil {
		t.Fatal(err)
	}

	cl, err := client.New(ctx, client.WithConfig(tc), client.WithEndpoints(cp.IP()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close() //nolint:errcheck

	mv := waitVoters(t, cl, 1, time.Minute)
	if len(mv.names) != 1 {
		t.Errorf("etcd members %v", mv.names)
	}

	if _, err := cl.MachineClient.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err == nil {
		t.Error("a second bootstrap succeeded: the first did not happen")
	}

	cfg := string(res.ControlPlane)
	if !strings.Contains(cfg, "name: cilium") || !strings.Contains(cfg, "ipam: kubernetes") || strings.Contains(cfg, "kind: KubeFlannelCNIConfig") {
		t.Errorf("the control plane's configuration lacks the inline Cilium manifest or keeps flannel:\n%s", cfg)
	}

	if strings.Contains(string(res.Worker), "cilium") {
		t.Error("the worker's configuration carries the inline manifest")
	}

	if !strings.Contains(string(res.SecretsYAML), "cluster:") || !strings.Contains(string(res.SecretsYAML), "certs:") {
		t.Errorf("secrets bundle:\n%s", res.SecretsYAML)
	}
}
