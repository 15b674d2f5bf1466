package talosemu_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPacketCapture reads a bounded capture of a node's link as talosctl pcap
// does (the caller ends it by its context): a pcap stream whose file header
// carries the snap length asked for and whose records are cut to it; an
// unknown interface is NotFound and a reader is not authorized.
func TestPacketCapture(t *testing.T) {
	spec := testSpec(1)
	w := startWorld(t, spec, "")
	c := getCluster(t)
	m := w.Machines()[0]

	provision(t, c, m, c.controlPlane)

	links, err := safe.StateListAll[*network.LinkStatus](t.Context(), c.admin(t, m.IP()).COSI)
	if err != nil || links.Len() == 0 {
		t.Fatalf("the node's links: %d, %v", links.Len(), err)
	}

	link := links.Get(0).Metadata().ID()
	operator := c.clientWithRoles(t, m.IP(), role.Operator)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()

	stream, err := operator.MachineClient.PacketCapture(ctx, &machineapi.PacketCaptureRequest{Interface: link, SnapLen: 30})
	if err != nil {
		t.Fatal(err)
	}

	var data []byte

	for {
		msg, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, io.EOF) {
				t.Fatalf("the capture ended with %v, want the caller's deadline", err)
			}

			break
		}

		data = append(data, msg.GetBytes()...)
	}

	if len(data) < 24 {
		t.Fatalf("capture of %d bytes: no pcap file header", len(data))
	}

	if got := binary.LittleEndian.Uint32(data[0:]); got != 0xa1b2c3d4 {
		t.Fatalf("pcap magic %#x, want 0xa1b2c3d4", got)
	}

	if got := binary.LittleEndian.Uint32(data[16:]); got != 30 {
		t.Errorf("snap length %d in the file header, want 30", got)
	}

	if got := binary.LittleEndian.Uint32(data[20:]); got != 1 {
		t.Errorf("link type %d, want 1 (Ethernet)", got)
	}

	records := 0

	for rest := data[24:]; len(rest) >= 16; records++ {
		incl, orig := binary.LittleEndian.Uint32(rest[8:]), binary.LittleEndian.Uint32(rest[12:])
		if incl != 30 || orig != 42 {
			t.Fatalf("record %d: %d of %d bytes, want 30 of a 42-byte ARP frame", records, incl, orig)
		}

		if len(rest) < 16+int(incl) {
			t.Fatalf("record %d is cut short", records)
		}

		rest = rest[16+incl:]
	}

	if records == 0 {
		t.Error("a two-second capture holds no frame")
	}

	err = recvFirst(operator, &machineapi.PacketCaptureRequest{Interface: "nope0"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("unknown interface: %v, want NotFound", err)
	}

	err = recvFirst(c.clientWithRoles(t, m.IP(), role.Reader), &machineapi.PacketCaptureRequest{Interface: link})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("os:reader: %v, want PermissionDenied", err)
	}
}

// recvFirst starts a capture and returns the error of its first message.
func recvFirst(cl *client.Client, req *machineapi.PacketCaptureRequest) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	stream, err := cl.MachineClient.PacketCapture(ctx, req)
	if err != nil {
		return err
	}

	_, err = stream.Recv()

	return err
}
