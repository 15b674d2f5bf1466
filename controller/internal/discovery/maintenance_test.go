package discovery_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// The maintenance connection of contracts/pkg/talos is tested here, against
// the emulator: contracts may not import tools/talosemu (.golangci.yml), and
// discovery is the reader that dials without a pin.

// pinnedGets is how many COSI Get calls reached the machine "pinned".
func pinnedGets() int { return mustMachine("pinned").RPCCounts()["/cosi.resource.State/Get"] }

func TestMaintenancePinRefusesAnotherCertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	em := mustMachine("pinned")

	// The allowed neighbour: the node's own fingerprint reads.
	ok, err := talos.DialMaintenance(ctx, em.IP(), 0, em.MaintenanceFingerprint())
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()

	if stage, err := ok.Stage(ctx); err != nil || stage != "maintenance" {
		t.Fatalf("with the node's own pin: stage %q, %v", stage, err)
	}

	before := pinnedGets()

	other := mustMachine("m-1").MaintenanceFingerprint()

	mn, err := talos.DialMaintenance(ctx, em.IP(), 0, other)
	if err != nil {
		t.Fatal(err)
	}
	defer mn.Close()

	_, err = mn.Stage(ctx)
	if err == nil || !strings.Contains(err.Error(), talos.ErrFingerprintMismatch.Error()) {
		t.Fatalf("with another machine's pin: %v, want %q", err, talos.ErrFingerprintMismatch)
	}

	if got := mn.Fingerprint(); got != em.MaintenanceFingerprint() {
		t.Errorf("Fingerprint() = %q, want the certificate the node presented, %q", got, em.MaintenanceFingerprint())
	}

	if n := pinnedGets() - before; n != 0 {
		t.Errorf("%d reads reached the node behind a refused certificate", n)
	}
}

func TestMaintenancePinsTheFirstCertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	em := mustMachine("pinned")
	first := em.MaintenanceFingerprint()

	mn, err := talos.DialMaintenance(ctx, em.IP(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer mn.Close()

	if _, err := mn.Stage(ctx); err != nil {
		t.Fatalf("first read without a pin: %v", err)
	}

	if mn.Fingerprint() != first {
		t.Fatalf("recorded %q, want %q", mn.Fingerprint(), first)
	}

	// Another certificate at the same address, met on a new handshake of the
	// same connection: the machine's key changes and it restarts its API.
	second, err := em.ReplaceMaintenanceCert()
	if err != nil {
		t.Fatal(err)
	}

	if err := em.PowerOff(); err != nil {
		t.Fatal(err)
	}

	if err := em.PowerOn(); err != nil {
		t.Fatal(err)
	}

	if err := em.WaitStage(ctx, runtime.MachineStageMaintenance, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	before := pinnedGets()

	// Wait for the positive marker, a handshake with the new certificate, then
	// look at what the read that met it gave.
	var last error

	for mn.Fingerprint() != second {
		if ctx.Err() != nil {
			t.Fatalf("the connection never met the new certificate (seen %q, last error %v)", mn.Fingerprint(), last)
		}

		_, last = mn.Stage(ctx)

		time.Sleep(100 * time.Millisecond)
	}

	_, err = mn.Stage(ctx)
	if err == nil || !strings.Contains(err.Error(), talos.ErrCertificateChanged.Error()) {
		t.Fatalf("a read after the certificate changed: %v, want %q", err, talos.ErrCertificateChanged)
	}

	if n := pinnedGets() - before; n != 0 {
		t.Errorf("%d reads reached the node behind the changed certificate", n)
	}

	// The allowed neighbour: a new connection records the new certificate and reads.
	fresh, err := talos.DialMaintenance(ctx, em.IP(), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()

	if _, err := fresh.Stage(ctx); err != nil || fresh.Fingerprint() != second {
		t.Fatalf("a new connection: fingerprint %q (want %q), %v", fresh.Fingerprint(), second, err)
	}
}
