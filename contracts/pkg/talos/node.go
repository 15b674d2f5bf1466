// Package talos is Ichor's one client of the Talos API, shared by the
// controller, the CLI and ichor-ui: configured nodes are reached with an
// admin client certificate issued from the cluster's bundle (Dialer), or with
// a given certificate or talosconfig (DialWithCertificate, DialTalosconfig);
// nodes in maintenance mode over the unauthenticated connection with the
// maintenance certificate's fingerprint pinned (DialMaintenance), where
// ReadInventory reads who the machine is and what hardware it has. A call that
// changes a configured node goes through VerifyIdentity's Verified, which
// checks first that the node is the machine the caller means; Message turns a
// node's error into text safe for a status or an Event.
package talos

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/protobuf"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	configpb "github.com/siderolabs/talos/pkg/machinery/api/resource/config"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/protobuf/proto"
)

// DefaultCertTTL is the lifetime of the admin client certificate Dialer
// issues for one connection when CertTTL is zero.
const DefaultCertTTL = 10 * time.Minute

// Dialer connects to configured Talos nodes with an admin client certificate
// issued from the cluster's bundle. Port zero means Talos's apid port.
type Dialer struct {
	Port int
	// CertTTL is the lifetime of the client certificate Dial issues; zero
	// means DefaultCertTTL. A certificate is used for the first half of its
	// life, then a new one is issued.
	CertTTL time.Duration
	// Reuse, when set, keeps each connection Dial makes and hands it to the
	// Dials of the same node with the same trust for up to this long (see
	// pool.go); Close then closes the kept ones. Zero: every Dial makes its
	// own connection, which its Node's Close closes.
	Reuse time.Duration

	mu    sync.Mutex
	certs map[[sha256.Size]byte]issuedCert
	conns map[connKey]*pooledConn
	swept time.Time
}

// issuedCert is a client certificate Dialer issued and the time it stops
// handing it out.
type issuedCert struct {
	cert  tls.Certificate
	until time.Time
}

// maxIssuedCerts bounds the certificates a Dialer keeps (one per OS CA).
const maxIssuedCerts = 64

// Node is a connection to one node's Talos API.
type Node struct {
	c       *talosclient.Client
	address string
	// release, on a Dialer's kept connection, is Close: the connection
	// stays for the next Dial.
	release func()
}

// Dial connects to the node at address with the bundle's OS CA.
func (d *Dialer) Dial(ctx context.Context, address string, b *secrets.Bundle) (*Node, error) {
	if b.Certs == nil || b.Certs.OS == nil {
		return nil, errNoOSCA
	}

	roots := stdx509.NewCertPool()
	if !roots.AppendCertsFromPEM(b.Certs.OS.Crt) {
		return nil, errors.New("the secrets bundle's OS CA does not parse")
	}

	// While a CA rotation runs, a node may still present a certificate of the
	// CA the bundle is rotating from (or to): the accepted ones are trusted too.
	accepted := acceptedBeside(b.Certs.OS.Crt)
	for _, c := range accepted {
		roots.AppendCertsFromPEM(c)
	}

	if d.Reuse > 0 {
		return d.dialKept(ctx, address, b, roots, accepted)
	}

	cert, err := d.clientCert(b)
	if err != nil {
		return nil, err
	}

	c, err := DialWithCertificate(ctx, address, d.Port, cert, roots)
	if err != nil {
		return nil, err
	}

	return &Node{c: c, address: address}, nil
}

// clientCert is an os:admin client certificate of the bundle's OS CA: the
// one issued before while it is in the first half of its life, else a new
// one. Issuing and loading a certificate at every dial was a tenth of what a
// look at an idle machine cost the controller.
func (d *Dialer) clientCert(b *secrets.Bundle) (tls.Certificate, error) {
	ttl := d.certTTL()

	ca := osCAKey(b)
	now := time.Now()

	d.mu.Lock()
	defer d.mu.Unlock()

	if c, ok := d.certs[ca]; ok && now.Before(c.until) {
		return c.cert, nil
	}

	pem, err := b.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Admin), ttl)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue a Talos API client certificate: %w", err)
	}

	cert, err := tls.X509KeyPair(pem.Crt, pem.Key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("load the Talos API client certificate: %w", err)
	}

	if d.certs == nil || len(d.certs) >= maxIssuedCerts {
		d.certs = map[[sha256.Size]byte]issuedCert{}
	}

	d.certs[ca] = issuedCert{cert: cert, until: now.Add(ttl / 2)}

	return cert, nil
}

// certTTL is CertTTL, DefaultCertTTL when zero.
func (d *Dialer) certTTL() time.Duration {
	if d.CertTTL == 0 {
		return DefaultCertTTL
	}

	return d.CertTTL
}

// osCAKey names a bundle's OS CA (certificate and key) in Dialer's certificates.
func osCAKey(b *secrets.Bundle) [sha256.Size]byte {
	h := sha256.New()
	h.Write(b.Certs.OS.Crt)
	h.Write([]byte{0})
	h.Write(b.Certs.OS.Key)

	var ca [sha256.Size]byte

	h.Sum(ca[:0])

	return ca
}

// Client is the machinery client of the connection, for reads. A call that
// changes the node goes through VerifyIdentity's Verified, never through this.
func (n *Node) Client() *talosclient.Client { return n.c }

// Close closes the connection, or, on a connection a Dialer keeps (Reuse),
// gives it back.
func (n *Node) Close() {
	if n.release != nil {
		n.release()

		return
	}

	_ = n.c.Close()
}

// Config reads the node's active and persistent configurations over COSI
// (MachineConfig v1alpha1 and persistent). The persistent one is ahead of the
// active one after a STAGED apply; it is nil when the node has none.
//
// The bytes are the configuration as the node keeps it, not decoded here:
// MachineConfig's spec carries the bytes the node loaded, byte for byte
// (MachineConfigSpec.yaml_marshalled, the readonly container's Bytes,
// t:pkg/machinery/resources/config/machine_config.go MarshalProto and
// t:pkg/machinery/config/container/container.go Bytes). A caller comparing
// them with a render pays for no decode when they are the same bytes
// (plan.FromBytes), which is every look at a machine in sync.
func (n *Node) Config(ctx context.Context) (active, persistent []byte, err error) {
	read := func(id string) ([]byte, error) {
		md := resource.NewMetadata(config.NamespaceName, config.MachineConfigType, id, resource.VersionUndefined)

		r, err := n.c.COSI.Get(ctx, md, state.WithGetUnmarshalOptions(state.WithSkipProtobufUnmarshal()))
		if err != nil {
			if state.IsNotFoundError(err) {
				return nil, nil
			}

			return nil, fmt.Errorf("read MachineConfig %s: %w", id, err)
		}

		return machineConfigBytes(r)
	}

	if active, err = read(config.ActiveID); err != nil {
		return nil, nil, err
	}

	if active == nil {
		return nil, nil, errors.New("the node has no active configuration")
	}

	if persistent, err = read(config.PersistentID); err != nil {
		return nil, nil, err
	}

	return active, persistent, nil
}

// machineConfigBytes takes the configuration out of a MachineConfig read
// without unmarshaling its spec.
func machineConfigBytes(r resource.Resource) ([]byte, error) {
	pr, ok := r.(*protobuf.Resource)
	if !ok {
		return nil, fmt.Errorf("MachineConfig %s came back as %T, not as its protobuf form", r.Metadata().ID(), r)
	}

	raw, err := pr.Marshal()
	if err != nil {
		return nil, fmt.Errorf("MachineConfig %s: %w", r.Metadata().ID(), err)
	}

	var spec configpb.MachineConfigSpec
	if err := proto.Unmarshal(raw.GetSpec().GetProtoSpec(), &spec); err != nil {
		return nil, fmt.Errorf("MachineConfig %s: its spec does not decode: %w", r.Metadata().ID(), err)
	}

	if len(spec.GetYamlMarshalled()) == 0 {
		return nil, fmt.Errorf("MachineConfig %s carries no configuration", r.Metadata().ID())
	}

	return spec.GetYamlMarshalled(), nil
}

// Stage reads MachineStatus: the node's stage in Ichor's words, and whether
// Talos reports the machine ready at that stage.
func (n *Node) Stage(ctx context.Context) (stage string, ready bool, err error) {
	ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, n.c.COSI, runtime.MachineStatusID)
	if err != nil {
		return "", false, fmt.Errorf("read MachineStatus: %w", err)
	}

	return StageName(ms.TypedSpec().Stage), ms.TypedSpec().Status.Ready, nil
}

// EtcdMember is one member as the node's etcd lists it.
type EtcdMember struct {
	ID       uint64
	Hostname string
	PeerURLs []string
	Learner  bool
}

// EtcdMembers lists the etcd members through this control plane.
func (n *Node) EtcdMembers(ctx context.Context) ([]EtcdMember, error) {
	resp, err := n.c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{})
	if err != nil {
		return nil, fmt.Errorf("list etcd members: %w", err)
	}

	var out []EtcdMember

	for _, msg := range resp.GetMessages() {
		for _, m := range msg.GetMembers() {
			out = append(out, EtcdMember{ID: m.GetId(), Hostname: m.GetHostname(), PeerURLs: m.GetPeerUrls(), Learner: m.GetIsLearner()})
		}
	}

	return out, nil
}

// EtcdHealthy reports whether this node's etcd member answers a status call.
func (n *Node) EtcdHealthy(ctx context.Context) bool {
	_, err := n.c.EtcdStatus(ctx)

	return err == nil
}

// Kubeconfig fetches the admin kubeconfig from a control plane.
func (n *Node) Kubeconfig(ctx context.Context) ([]byte, error) {
	b, err := n.c.Kubeconfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetch the kubeconfig: %w", err)
	}

	return b, nil
}

// EtcdStatus is this node's etcd member as it reports itself.
type EtcdStatus struct {
	// MemberID is the member's ID; Leader the ID of the member it follows
	// (its own when it leads).
	MemberID, Leader uint64
	// Errors are the member's alarms and errors as etcd reports them.
	Errors []string
	// Learner is true for a member that does not vote yet.
	Learner bool
}

// IsLeader reports whether the member leads its cluster.
func (s *EtcdStatus) IsLeader() bool { return s.MemberID != 0 && s.MemberID == s.Leader }

// EtcdMemberStatus reads this node's etcd member status (Talos's EtcdStatus,
// machined's v1alpha1_server.go, which answers from the local member's
// maintenance Status call).
func (n *Node) EtcdMemberStatus(ctx context.Context) (*EtcdStatus, error) {
	resp, err := n.c.EtcdStatus(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the etcd status: %w", err)
	}

	for _, msg := range resp.GetMessages() {
		st := msg.GetMemberStatus()
		if st == nil {
			continue
		}

		return &EtcdStatus{MemberID: st.GetMemberId(), Leader: st.GetLeader(), Errors: st.GetErrors(), Learner: st.GetIsLearner()}, nil
	}

	return nil, errors.New("read the etcd status: the node answered with no member status")
}

// EtcdSnapshot streams a snapshot of this node's etcd member (Talos's
// EtcdSnapshot, the stream `talosctl etcd snapshot` saves) into w and
// returns how many bytes it wrote. The stream is etcd's own snapshot: the
// bbolt database followed by its sha256 (etcd's maintenance Snapshot).
func (n *Node) EtcdSnapshot(ctx context.Context, w io.Writer) (int64, error) {
	rd, err := n.c.EtcdSnapshot(ctx, &machine.EtcdSnapshotRequest{})
	if err != nil {
		return 0, fmt.Errorf("start the etcd snapshot: %w", err)
	}

	defer rd.Close() //nolint:errcheck // read-only stream

	written, err := io.Copy(w, rd)
	if err != nil {
		return written, fmt.Errorf("read the etcd snapshot: %w", err)
	}

	return written, nil
}

// TalosVersion is the Talos version the node runs (its Version call's tag).
func (n *Node) TalosVersion(ctx context.Context) (string, error) {
	resp, err := n.c.Version(ctx)
	if err != nil {
		return "", fmt.Errorf("read the Talos version: %w", err)
	}

	for _, msg := range resp.GetMessages() {
		if v := msg.GetVersion(); v != nil {
			return v.GetTag(), nil
		}
	}

	return "", errors.New("read the Talos version: the node answered with none")
}
