package main

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/tools/talosemu"
)

// TestMachineReclaim resets a control plane of a foreign cluster through the
// CLI with that cluster's own talosconfig: refused without --force (its etcd
// cannot be shown to survive), refused with a wrong UUID, and reset exactly
// once with the right one. The talosconfig never shows in the output.
func TestMachineReclaim(t *testing.T) {
	ctx := context.Background()

	w, err := talosemu.Start(ctx, &talosemu.Spec{
		Subnet:   "127.0.93.0/24",
		Machines: []talosemu.MachineSpec{{Name: "their-cp", Role: talosemu.RoleHintControlPlane}},
		Durations: talosemu.Durations{
			Install: talosemu.Duration(100 * time.Millisecond), Reboot: talosemu.Duration(100 * time.Millisecond), Boot: talosemu.Duration(50 * time.Millisecond),
		},
	}, t.TempDir(), talosemu.Options{NoControlAPI: true})
	must(t, err)
	t.Cleanup(w.Close)

	em := w.Machines()[0]
	theirs, err := bundle.Generate(secrets.NewClock(), "v1.14")
	must(t, err)

	configureForeign(t, em, theirs)

	tc := writeTalosconfig(t, theirs)
	addr := em.IP()

	r := mustFail(t, ichor(t, "machine", "reclaim", addr, "--talosconfig", tc, "--confirm-uuid", em.UUID()),
		"refused", "nothing was changed", "--force")
	checkNoCredential(t, r.all(), tc)

	r = mustFail(t, ichor(t, "machine", "reclaim", addr, "--talosconfig", tc, "--force", "--confirm-uuid", "00000000-0000-0000-0000-000000000000"),
		"not the machine's UUID")
	checkNoCredential(t, r.all(), tc)

	if n := em.RPCCounts()["/machine.MachineService/Reset"]; n != 0 {
		t.Fatalf("a refused reclaim sent %d resets", n)
	}

	r = mustSucceed(t, ichor(t, "machine", "reclaim", addr, "--talosconfig", tc, "--force", "--confirm-uuid", strings.ToUpper(em.UUID())))
	checkNoCredential(t, r.all(), tc)

	for _, want := range []string{em.UUID(), "their-cp", "reset requested", "ichor cluster discovery add " + addr} {
		if !strings.Contains(r.all(), want) {
			t.Errorf("the output does not name %q:\n%s", want, r.all())
		}
	}

	if n := em.RPCCounts()["/machine.MachineService/Reset"]; n != 1 {
		t.Errorf("the reclaim sent %d resets, want 1", n)
	}

	deadline := time.Now().Add(30 * time.Second)
	for em.Stage() != runtime.MachineStageMaintenance {
		if time.Now().After(deadline) {
			t.Fatalf("the machine did not come back in maintenance mode (stage %s)", em.Stage())
		}

		time.Sleep(50 * time.Millisecond)
	}
}

// configureForeign configures a maintenance machine as another cluster's
// tooling would, and waits until it runs.
func configureForeign(t *testing.T, em *talosemu.Machine, b *secrets.Bundle) {
	t.Helper()

	c := newCluster("theirs", "theirs")
	m := newMachine("theirs", "their-cp", "theirs")
	m.Spec.Role, m.Spec.Hostname = ichorv1alpha1.RoleControlPlane, "their-cp"
	m.Spec.Approval = ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "them", DecidedAt: &metav1.Time{Time: time.Now()}}
	m.Spec.Install.Disk = &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}

	res, err := render.Render(render.Input{Cluster: c, Machine: m, Bundle: b})
	must(t, err)

	must(t, em.ApplyInMaintenance(context.Background(), res.Bytes, 30*time.Second))
}

// writeTalosconfig writes the foreign cluster's os:admin talosconfig; its
// endpoint is an address nothing answers on (the CLI dials only the address given).
func writeTalosconfig(t *testing.T, b *secrets.Bundle) string {
	t.Helper()

	admin, err := b.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	must(t, err)

	b64 := base64.StdEncoding.EncodeToString
	cfg := &clientconfig.Config{Context: "theirs", Contexts: map[string]*clientconfig.Context{"theirs": {
		Endpoints: []string{"192.0.2.1"}, Nodes: []string{"192.0.2.1"},
		CA: b64(b.Certs.OS.Crt), Crt: b64(admin.Crt), Key: b64(admin.Key),
	}}}

	out, err := cfg.Bytes()
	must(t, err)

	p := filepath.Join(t.TempDir(), "talosconfig")
	must(t, os.WriteFile(p, out, 0o600))

	return p
}

// checkNoCredential fails when any part of the talosconfig's credential shows in out.
func checkNoCredential(t *testing.T, out, talosconfigFile string) {
	t.Helper()

	cfg, err := clientconfig.Open(talosconfigFile)
	must(t, err)

	c := cfg.Contexts[cfg.Context]
	for _, secret := range []string{c.Key, c.Crt} {
		key, err := base64.StdEncoding.DecodeString(secret)
		must(t, err)

		for _, line := range strings.Split(string(key), "\n") {
			if len(line) > 20 && !strings.HasPrefix(line, "-----") && strings.Contains(out, line) {
				t.Fatalf("the output shows the talosconfig's credential:\n%s", out)
			}
		}

		if strings.Contains(out, secret[:40]) {
			t.Fatalf("the output shows the talosconfig's credential (base64):\n%s", out)
		}
	}
}
