package talosemu

import (
	"encoding/binary"
	"net"
	"net/netip"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/nethelpers"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// pcapInterval is how often the emulated capture sees a frame.
const pcapInterval = 50 * time.Millisecond

// pcapDefaultSnapLen is Talos's snap length when the request leaves it zero
// (afpacket.DefaultFrameSize, which Talos uses).
const pcapDefaultSnapLen = 4096

// PacketCapture streams a capture of one link in the pcap file format, as
// Talos does (t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go
// PacketCapture and CapturePackets): NotFound "interface %q not found" for a link
// the machine has no LinkStatus of, the file header (microsecond pcap,
// version 2.4, the snap length, 4096 when zero, link type Ethernet), then the
// frames until the caller's context ends, when it returns the context's error.
// Each write is one Data message. There is no real traffic: every
// pcapInterval the link "sees" one gratuitous ARP request from the machine's
// address, cut to the snap length. BPF filters and promiscuous mode are accepted
// and have no effect.
func (s *apiServer) PacketCapture(in *machine.PacketCaptureRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	ctx := srv.Context()

	link, err := safe.StateGetByID[*network.LinkStatus](ctx, s.m.st, in.GetInterface())
	if err != nil {
		if state.IsNotFoundError(err) {
			return status.Errorf(codes.NotFound, "interface %q not found", in.GetInterface())
		}

		return err
	}

	switch link.TypedSpec().Type { //nolint:exhaustive // as Talos: the rest is unsupported
	case nethelpers.LinkEther, nethelpers.LinkLoopbck:
	default:
		return status.Errorf(codes.InvalidArgument, "unsupported link type %s", link.TypedSpec().Type)
	}

	snapLen := in.GetSnapLen()
	if snapLen == 0 {
		snapLen = pcapDefaultSnapLen
	}

	header := make([]byte, 24)
	binary.LittleEndian.PutUint32(header[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(header[4:], 2)
	binary.LittleEndian.PutUint16(header[6:], 4)
	binary.LittleEndian.PutUint32(header[16:], snapLen)
	binary.LittleEndian.PutUint32(header[20:], 1) // LINKTYPE_ETHERNET

	if err := srv.Send(&common.Data{Bytes: header}); err != nil {
		return err
	}

	s.m.mu.Lock()
	addr := s.m.p.Hardware.Address
	s.m.mu.Unlock()

	frame := arpAnnouncement(net.HardwareAddr(link.TypedSpec().HardwareAddr), addr)

	t := time.NewTicker(pcapInterval)
	defer t.Stop()

	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-t.C:
			data := frame[:min(len(frame), int(snapLen))]
			rec := make([]byte, 16, 16+len(data))
			binary.LittleEndian.PutUint32(rec[0:], uint32(now.Unix()))            //nolint:gosec // seconds since 1970 fit until 2106
			binary.LittleEndian.PutUint32(rec[4:], uint32(now.Nanosecond()/1000)) //nolint:gosec // below 10^6
			binary.LittleEndian.PutUint32(rec[8:], uint32(len(data)))             //nolint:gosec // at most the frame
			binary.LittleEndian.PutUint32(rec[12:], uint32(len(frame)))           //nolint:gosec // a 42-byte frame
			if err := srv.Send(&common.Data{Bytes: append(rec, data...)}); err != nil {
				return err
			}
		}
	}
}

// arpAnnouncement is an Ethernet broadcast ARP request for the machine's own
// address from its link (a gratuitous ARP, RFC 5227 section 3).
func arpAnnouncement(mac net.HardwareAddr, address string) []byte {
	if len(mac) != 6 {
		mac = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	}

	ip := [4]byte{}
	if a, err := netip.ParseAddr(address); err == nil && a.Is4() {
		ip = a.As4()
	}

	f := make([]byte, 0, 42)
	f = append(f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff) // destination: broadcast
	f = append(f, mac...)
	f = append(f, 0x08, 0x06)       // EtherType ARP
	f = append(f, 0x00, 0x01)       // hardware type Ethernet
	f = append(f, 0x08, 0x00)       // protocol IPv4
	f = append(f, 6, 4, 0x00, 0x01) // sizes, request
	f = append(f, mac...)
	f = append(f, ip[:]...)
	f = append(f, 0, 0, 0, 0, 0, 0)
	f = append(f, ip[:]...)

	return f
}
