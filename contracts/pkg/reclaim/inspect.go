package reclaim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/hardware"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"

	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// Disk is a disk the reset leaves alone.
type Disk struct {
	// Name is the disk's name, for example nvme1n1.
	Name string
	// DevPath is its device path.
	DevPath string
	// Size is its size in bytes.
	Size uint64
	// Model and Serial identify it for a person.
	Model, Serial string
}

// String returns "nvme1n1 (512 GB, Model, serial S)".
func (d Disk) String() string {
	parts := []string{humanSize(d.Size)}
	if d.Model != "" {
		parts = append(parts, d.Model)
	}

	if d.Serial != "" {
		parts = append(parts, "serial "+d.Serial)
	}

	return fmt.Sprintf("%s (%s)", d.Name, strings.Join(parts, ", "))
}

// Inspection is what Inspect read from a configured machine.
type Inspection struct {
	// UUID is the SMBIOS UUID, the consent a person types.
	UUID string
	// Serial is the SMBIOS serial number.
	Serial string
	// Hostname is the node's hostname.
	Hostname string
	// MachineType is the configured type: controlplane, init or worker.
	MachineType string
	// ControlPlane is true for a control plane (etcd member).
	ControlPlane bool
	// ClusterName is the foreign cluster's name.
	ClusterName string
	// ClusterID is the foreign cluster's ID (cluster.id; not a secret).
	ClusterID string
	// OSCAFingerprint is the SHA-256 of the Talos API CA certificate (DER), hex.
	OSCAFingerprint string
	// KubernetesCAFingerprint is the SHA-256 of the Kubernetes CA certificate (DER), hex.
	KubernetesCAFingerprint string
	// SystemDisk is the name of the disk Talos is installed on.
	SystemDisk string
	// UserDisks are the other disks; the reset does not touch them.
	UserDisks []Disk
	// EncryptedVolumes are the user volumes the configuration encrypts.
	EncryptedVolumes []string
	// EtcdMembers are the etcd members, with their health, for a control plane.
	EtcdMembers []guard.EtcdMember
	// LocalMemberID is this machine's etcd member ID; zero when unknown.
	LocalMemberID uint64
	// EtcdError says why the etcd members could not be read; empty when they were.
	EtcdError string
}

// Inspect reads a configured machine over c, a connection made with the
// foreign talosconfig to the one address of the request: identity (SMBIOS
// UUID and serial), hostname, machine type, cluster name and ID and the CA
// fingerprints from the running configuration, the disks, the encrypted user
// volumes, and, on a control plane, the etcd members and their health.
//
// Health: this machine's member is healthy when its status shows a leader and
// no errors. Another member's status is asked through this machine's apid
// (node targeting, the way `talosctl -e ADDRESS -n MEMBER etcd status` works:
// Ichor still dials only ADDRESS); a member whose answer does not come from
// that member is counted unhealthy, which makes the decision refuse rather
// than allow.
//
// A failure to read etcd is recorded in EtcdError, not returned: a dead
// foreign cluster is what `force` is for.
func Inspect(ctx context.Context, c *talosclient.Client) (*Inspection, error) {
	in := &Inspection{}

	si, err := safe.StateGetByID[*hardware.SystemInformation](ctx, c.COSI, hardware.SystemInformationID)
	if err != nil {
		return nil, fmt.Errorf("read the machine's identity (SystemInformation): %w", err)
	}

	in.UUID = strings.ToLower(si.TypedSpec().UUID)
	in.Serial = si.TypedSpec().SerialNumber

	hs, err := safe.StateGetByID[*network.HostnameStatus](ctx, c.COSI, network.HostnameID)
	if err != nil {
		return nil, fmt.Errorf("read the machine's hostname: %w", err)
	}

	in.Hostname = hs.TypedSpec().Hostname

	mc, err := safe.StateGetByID[*config.MachineConfig](ctx, c.COSI, config.ActiveID)
	if err != nil {
		return nil, fmt.Errorf("read the machine's running configuration (this needs an os:admin talosconfig): %w", err)
	}

	readConfig(in, mc.Config())

	if err := readDisks(ctx, c, in); err != nil {
		return nil, err
	}

	if in.ControlPlane {
		readEtcd(ctx, c, in)
	}

	return in, nil
}

func readConfig(in *Inspection, cfg talosconfig.Config) {
	if cfg.Machine() != nil {
		in.MachineType = cfg.Machine().Type().String()
		in.ControlPlane = cfg.Machine().Type().IsControlPlane()

		if sec := cfg.Machine().Security(); sec != nil && sec.IssuingCA() != nil {
			in.OSCAFingerprint = Fingerprint(sec.IssuingCA().Crt)
		}
	}

	if kc := cfg.K8sClusterConfig(); kc != nil {
		in.ClusterName = kc.ClusterName()
	}

	if id := cfg.DiscoveryIdentityConfig(); id != nil {
		in.ClusterID = id.ClusterID()
	}

	if ca := cfg.K8sAPIServerCAConfig(); ca != nil && ca.IssuingCA() != nil {
		in.KubernetesCAFingerprint = Fingerprint(ca.IssuingCA().Crt)
	}

	for _, v := range cfg.UserVolumeConfigs() {
		if v.Encryption() != nil {
			in.EncryptedVolumes = append(in.EncryptedVolumes, v.Name())
		}
	}
}

func readDisks(ctx context.Context, c *talosclient.Client, in *Inspection) error {
	if sd, err := safe.StateGetByID[*block.SystemDisk](ctx, c.COSI, block.SystemDiskID); err == nil {
		in.SystemDisk = sd.TypedSpec().DiskID
	}

	disks, err := safe.StateListAll[*block.Disk](ctx, c.COSI)
	if err != nil {
		return fmt.Errorf("list the machine's disks: %w", err)
	}

	for d := range disks.All() {
		s := d.TypedSpec()
		if d.Metadata().ID() == in.SystemDisk || s.CDROM || s.Readonly || strings.HasPrefix(d.Metadata().ID(), "loop") {
			continue
		}

		in.UserDisks = append(in.UserDisks, Disk{Name: d.Metadata().ID(), DevPath: s.DevPath, Size: s.Size, Model: s.Model, Serial: s.Serial})
	}

	return nil
}

func readEtcd(ctx context.Context, c *talosclient.Client, in *Inspection) {
	local, err := memberStatus(ctx, c)
	if err != nil {
		in.EtcdError = fmt.Sprintf("read the local etcd member's status: %v", err)

		return
	}

	in.LocalMemberID = local.GetMemberId()

	resp, err := c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	if err != nil {
		in.EtcdError = fmt.Sprintf("list the etcd members: %v", err)

		return
	}

	for _, msg := range resp.GetMessages() {
		for _, m := range msg.GetMembers() {
			member := guard.EtcdMember{ID: m.GetId(), Name: m.GetHostname(), Learner: m.GetIsLearner()}

			switch {
			case m.GetId() == in.LocalMemberID:
				member.Healthy = healthy(local)
			default:
				member.Healthy = remoteHealthy(ctx, c, m)
			}

			in.EtcdMembers = append(in.EtcdMembers, member)
		}
	}

	if !slices.ContainsFunc(in.EtcdMembers, func(m guard.EtcdMember) bool { return m.ID == in.LocalMemberID }) {
		in.EtcdError = fmt.Sprintf("the local etcd member %x is not in the member list", in.LocalMemberID)
	}
}

func memberStatus(ctx context.Context, c *talosclient.Client) (*machine.EtcdMemberStatus, error) {
	resp, err := c.EtcdStatus(ctx)
	if err != nil {
		return nil, err
	}

	for _, msg := range resp.GetMessages() {
		if st := msg.GetMemberStatus(); st != nil {
			return st, nil
		}
	}

	return nil, errors.New("the node returned no etcd status")
}

func healthy(st *machine.EtcdMemberStatus) bool {
	return st != nil && st.GetLeader() != 0 && len(st.GetErrors()) == 0
}

// remoteHealthy asks the member's status through the dialled node's apid.
func remoteHealthy(ctx context.Context, c *talosclient.Client, m *machine.EtcdMember) bool {
	node := memberHost(m)
	if node == "" {
		return false
	}

	st, err := memberStatus(talosclient.WithNode(ctx, node), c)
	if err != nil || st.GetMemberId() != m.GetId() {
		return false
	}

	return healthy(st)
}

// memberHost is the host of the member's first client URL (its node address).
func memberHost(m *machine.EtcdMember) string {
	for _, raw := range m.GetClientUrls() {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}

		if host, _, err := net.SplitHostPort(u.Host); err == nil {
			return host
		}

		return u.Host
	}

	return ""
}

// Fingerprint returns the hex SHA-256 of the first certificate in pemBytes
// (its DER), or "" when there is none.
func Fingerprint(pemBytes []byte) string {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return ""
	}

	sum := sha256.Sum256(block.Bytes)

	return hex.EncodeToString(sum[:])
}

func humanSize(b uint64) string {
	const unit = 1000

	if b < unit {
		return fmt.Sprintf("%d B", b)
	}

	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}

	return fmt.Sprintf("%.1f %cB", float64(b)/float64(div), "kMGTPE"[exp])
}
