package talosemu_test

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/connectivity"

	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// Rule (issue 30, the controller's idle looks): a Dialer with Reuse hands
// the connection it made to a node to the next Dials of that node with the
// same trust, and makes a new one when that one stopped being usable: the
// node stopped answering (a call failed unavailable), the reuse period is
// over, or the trust changed. A connection dropped while a Node is open on
// it serves that Node until it is closed, then closes. Without Reuse every
// Dial makes its own connection.
func TestDialerReusesConnections(t *testing.T) {
	c := getCluster(t)
	w := startWorld(t, testSpec(1), "")
	m := w.Machines()[0]

	if err := m.ApplyInMaintenance(t.Context(), c.controlPlane, time.Minute); err != nil {
		t.Fatal(err)
	}

	if err := m.WaitStage(t.Context(), runtime.MachineStageRunning, 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	dial := func(t *testing.T, d *talos.Dialer) *talos.Node {
		t.Helper()

		n, err := d.Dial(t.Context(), m.IP(), c.bundle)
		if err != nil {
			t.Fatal(err)
		}

		return n
	}

	read := func(n *talos.Node) error {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()

		_, err := n.TalosVersion(ctx)

		return err
	}

	mustRead := func(t *testing.T, n *talos.Node) {
		t.Helper()

		if err := read(n); err != nil {
			t.Fatalf("read the node's version: %v", err)
		}
	}

	t.Run("without reuse, a connection per dial", func(t *testing.T) {
		d := &talos.Dialer{}
		a, b := dial(t, d), dial(t, d)

		defer a.Close()
		defer b.Close()

		mustRead(t, a)
		mustRead(t, b)

		if a.Client() == b.Client() {
			t.Fatal("two dials without Reuse share a connection")
		}

		if d.KeptConnections() != 0 {
			t.Fatalf("a Dialer without Reuse keeps %d connections", d.KeptConnections())
		}
	})

	t.Run("kept across dials, new after the node stopped answering", func(t *testing.T) {
		d := &talos.Dialer{Reuse: time.Hour, CertTTL: 2 * time.Hour}
		defer d.Close()

		first := dial(t, d)
		mustRead(t, first)
		first.Close()

		second := dial(t, d)
		if second.Client() != first.Client() {
			t.Fatal("the second dial of the same node made a new connection")
		}

		mustRead(t, second)
		second.Close()

		if got := d.KeptConnections(); got != 1 {
			t.Fatalf("the Dialer keeps %d connections, want 1", got)
		}

		// Another trust (a CA rotation's accepted CA), another connection.
		other, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersionCurrent)
		if err != nil {
			t.Fatal(err)
		}

		talos.Accept(c.bundle.Certs.OS.Crt, []string{string(other.Certs.OS.Crt)})

		rotating := dial(t, d)
		talos.Accept(c.bundle.Certs.OS.Crt, nil)

		if rotating.Client() == first.Client() {
			t.Fatal("a dial with another accepted CA got the connection of the first trust")
		}

		mustRead(t, rotating)
		rotating.Close()

		// The node stops answering: a call on the kept connection fails, and
		// the next dial, once it is back, makes a new connection at once.
		held := dial(t, d)
		if held.Client() != first.Client() {
			t.Fatal("the kept connection was not handed out again")
		}

		if err := m.PowerOff(); err != nil {
			t.Fatal(err)
		}

		if err := read(held); err == nil {
			t.Fatal("a call to a powered-off node succeeded")
		}

		held.Close()

		if err := m.PowerOn(); err != nil {
			t.Fatal(err)
		}

		// Back when a connection of its own reads it.
		testenv.EventuallyOK(t, 3*time.Minute, "the node answers again", func() (bool, string) {
			n := dial(t, &talos.Dialer{})
			defer n.Close()

			if err := read(n); err != nil {
				return false, err.Error()
			}

			return true, ""
		})

		after := dial(t, d)
		defer after.Close()

		if after.Client() == first.Client() {
			t.Fatal("after a failed call the Dialer handed out the same connection again")
		}

		mustRead(t, after)

		if st := first.Client().Conn().GetState(); st != connectivity.Shutdown {
			t.Fatalf("the dropped connection, no Node open on it, is %s, want closed", st)
		}
	})

	t.Run("past its period a connection is dropped, and closed with its last node", func(t *testing.T) {
		// The period is at most half the certificate's life.
		d := &talos.Dialer{Reuse: time.Hour, CertTTL: 2 * time.Second}
		defer d.Close()

		open := dial(t, d)
		mustRead(t, open)

		// Once half the certificate's life (1 s) has passed, a new one.
		var fresh *talos.Node

		testenv.EventuallyOK(t, time.Minute, "a new connection past half the certificate's life", func() (bool, string) {
			n := dial(t, d)
			if n.Client() == open.Client() {
				n.Close()

				return false, "the first connection is still handed out"
			}

			fresh = n

			return true, ""
		})

		defer fresh.Close()

		mustRead(t, fresh)
		mustRead(t, open) // the Node open on the dropped connection still works

		open.Close()

		if st := open.Client().Conn().GetState(); st != connectivity.Shutdown {
			t.Fatalf("the dropped connection is %s after its last Node closed, want closed", st)
		}

		d.Close()

		if d.KeptConnections() != 0 {
			t.Fatal("Close left kept connections")
		}

		mustRead(t, fresh) // a Node open at Close works until it is closed

		fresh.Close()

		if st := fresh.Client().Conn().GetState(); st != connectivity.Shutdown {
			t.Fatalf("after Close and its last Node, the connection is %s, want closed", st)
		}
	})
}
