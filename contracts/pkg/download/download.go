// Package download holds the three admin-gated downloads of one node's Talos
// state (architecture, "Trust"): a support bundle, an etcd snapshot and a
// packet capture, shared by ichor-ui (which calls Talos with a short-lived
// certificate a TalosCredentialRequest signed for the signed-in user) and
// the CLI (which calls Talos with the operator's own bundle). Each writes
// the bytes into an io.Writer as they come, so a caller streams them on.
// Every download leaves a Warning Event naming the user first (Event).
package download

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The kinds of download, named as their credential purposes.
const (
	SupportBundle = ichorv1alpha1.PurposeSupportBundle
	EtcdSnapshot  = ichorv1alpha1.PurposeEtcdSnapshot
	PacketCapture = ichorv1alpha1.PurposePacketCapture
)

// Limits of a packet capture.
const (
	// DefaultCaptureDuration is the capture's length when none is given.
	DefaultCaptureDuration = 10 * time.Second
	// MaxCaptureDuration is the longest capture: well inside the ten-minute
	// certificate it runs under.
	MaxCaptureDuration = 5 * time.Minute
	// DefaultSnapLen is the bytes kept of each frame when none is given (Talos's own default).
	DefaultSnapLen = 4096
	// MaxSnapLen is the most bytes kept of each frame.
	MaxSnapLen = 65535
	// MinSnapLen keeps at least the Ethernet, IP and TCP headers.
	MinSnapLen = 64
)

// interfaceName is a Linux interface name (at most 15 bytes, no slash or space).
var interfaceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`)

// Capture is a packet capture request.
type Capture struct {
	// Interface is the link to capture on (its Talos LinkStatus name, eth0, enp0s1...).
	Interface string
	// Duration is how long to capture; zero means DefaultCaptureDuration.
	Duration time.Duration
	// SnapLen is how many bytes of each frame to keep; zero means DefaultSnapLen.
	SnapLen uint32
	// Promiscuous captures frames not addressed to the node too.
	Promiscuous bool
}

// Normalize fills the defaults and checks the limits; the error names the
// parameter, the limit and what to give instead.
func (c Capture) Normalize() (Capture, error) {
	if c.Interface == "" {
		return c, errors.New("interface is required: name the node's link to capture on (eth0, enp0s1...; `ichor node get NODE` lists them)")
	}

	if !interfaceName.MatchString(c.Interface) {
		return c, fmt.Errorf("interface %q is not a network interface name: give at most 15 letters, digits, '.', '_' or '-'", c.Interface)
	}

	if c.Duration == 0 {
		c.Duration = DefaultCaptureDuration
	}

	if c.Duration < time.Second || c.Duration > MaxCaptureDuration {
		return c, fmt.Errorf("duration %s is outside 1s to %s: capture for at most %s, and take another capture for more", c.Duration, MaxCaptureDuration, MaxCaptureDuration)
	}

	if c.SnapLen == 0 {
		c.SnapLen = DefaultSnapLen
	}

	if c.SnapLen < MinSnapLen || c.SnapLen > MaxSnapLen {
		return c, fmt.Errorf("snap length %d is outside %d to %d bytes: give a length in that range, or none for %d", c.SnapLen, MinSnapLen, MaxSnapLen, DefaultSnapLen)
	}

	return c, nil
}

// WritePacketCapture captures on the node for the capture's duration
// (MachineService.PacketCapture, ended by the caller's context as talosctl
// pcap does: t:cmd/talosctl/cmd/talos/pcap.go) and writes the pcap stream
// into w. The end of the duration is a normal end; an error before it is returned.
func WritePacketCapture(ctx context.Context, c *talosclient.Client, capture Capture, w io.Writer) (int64, error) {
	capture, err := capture.Normalize()
	if err != nil {
		return 0, err
	}

	cctx, cancel := context.WithTimeout(ctx, capture.Duration)
	defer cancel()

	stream, err := c.MachineClient.PacketCapture(cctx, &machine.PacketCaptureRequest{
		Interface: capture.Interface, Promiscuous: capture.Promiscuous, SnapLen: capture.SnapLen,
	})
	if err != nil {
		return 0, fmt.Errorf("start the packet capture: %w", err)
	}

	var written int64

	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || (ctx.Err() == nil && cctx.Err() != nil && status.Code(err) == codes.DeadlineExceeded) {
				if written == 0 {
					return 0, errors.New("the packet capture ended before the node sent its pcap header")
				}

				return written, nil
			}

			return written, fmt.Errorf("read the packet capture: %w", err)
		}

		n, err := w.Write(msg.GetBytes())
		written += int64(n)

		if err != nil {
			return written, err
		}
	}
}

// WriteEtcdSnapshot streams a snapshot of the node's etcd member
// (MachineService.EtcdSnapshot, what `talosctl etcd snapshot` saves) into w.
func WriteEtcdSnapshot(ctx context.Context, c *talosclient.Client, w io.Writer) (int64, error) {
	rd, err := c.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	if err != nil {
		return 0, fmt.Errorf("start the etcd snapshot: %w", err)
	}

	defer rd.Close() //nolint:errcheck // read-only stream

	n, err := io.Copy(w, rd)
	if err != nil {
		return n, fmt.Errorf("read the etcd snapshot: %w", err)
	}

	if n == 0 {
		return 0, errors.New("the node sent an empty etcd snapshot")
	}

	return n, nil
}

// EventReason is the reason of a download's Warning Event.
const EventReason = "AdminDownload"

// Target is the object a download's Event is about: the TalosMachine of the
// node, or the TalosCluster for an etcd snapshot.
type Target struct {
	// Kind is TalosMachine or TalosCluster.
	Kind string
	// Namespace, Name and UID name the object.
	Namespace, Name string
	UID             string
}

// EventMessage is the text of a download's Event: who downloaded what, from which node.
func EventMessage(kind, user, node, detail string) string {
	msg := fmt.Sprintf("%s downloads %s of node %s", user, what(kind), node)
	if detail != "" {
		msg += " (" + detail + ")"
	}

	return msg
}

func what(kind string) string {
	switch kind {
	case SupportBundle:
		return "a support bundle"
	case EtcdSnapshot:
		return "an etcd snapshot"
	case PacketCapture:
		return "a packet capture"
	}

	return kind
}

// Event is the Warning Event a download leaves before its bytes flow,
// reported by component (ichor-ui or ichor, the CLI). It holds the user's
// name and what they took, never a credential.
func Event(kind, user, node, detail, component string, t Target, now time.Time) *corev1.Event {
	ts := metav1.NewTime(now)

	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, GenerateName: t.Name + ".download-"},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: ichorv1alpha1.GroupVersion.String(), Kind: t.Kind,
			Namespace: t.Namespace, Name: t.Name, UID: types.UID(t.UID),
		},
		Reason:              EventReason,
		Message:             EventMessage(kind, user, node, detail),
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: component},
		FirstTimestamp:      ts,
		LastTimestamp:       ts,
		Count:               1,
		Action:              "Download",
		ReportingController: "ichor.maesh.dev/" + component,
		ReportingInstance:   component,
	}
}
