package talosemu

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	stdx509 "crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/siderolabs/crypto/x509"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// etcd ports, as Talos (m:constants EtcdClientPort, EtcdPeerPort).
const (
	etcdClientPort = 2379
	etcdPeerPort   = 2380
)

// etcdRunning is the member this machine runs, nil when stopped.
type etcdRunning struct {
	e       *embed.Etcd
	tlsConf *tls.Config // admin client TLS (etcd CA)
	id      uint64
}

func (m *Machine) etcdDataDir() string      { return filepath.Join(m.dir, "etcd") }
func (m *Machine) etcdSnapshotPath() string { return filepath.Join(m.dir, "etcd.snapshot") }
func (m *Machine) etcdClientURL() string {
	return "https://" + net.JoinHostPort(m.IP(), fmt.Sprint(etcdClientPort))
}

func (m *Machine) etcdPeerURL() string {
	return "https://" + net.JoinHostPort(m.IP(), fmt.Sprint(etcdPeerPort))
}

// etcdCA returns the etcd CA of the running config (cluster.etcd.ca).
func etcdCA(cfg talosconfig.Provider) *x509.PEMEncodedCertificateAndKey {
	if cfg == nil || cfg.Cluster() == nil || cfg.Cluster().Etcd() == nil {
		return nil
	}

	ca := cfg.Cluster().Etcd().CA()
	if ca == nil || len(ca.Crt) == 0 || len(ca.Key) == 0 {
		return nil
	}

	return ca
}

// isControlPlane is true when the running config makes the machine a control plane.
func (m *Machine) isControlPlane() bool {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.active != nil && m.active.Machine() != nil && m.active.Machine().Type().IsControlPlane()
}

func (m *Machine) activeConfig() talosconfig.Provider {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.active
}

// signCert issues a certificate from ca. The key never leaves the returned PEM blocks.
func signCert(ca *x509.PEMEncodedCertificateAndKey, cn string, orgs []string, usages []stdx509.ExtKeyUsage, ips []net.IP, dns []string) (certPEM, keyPEM []byte, err error) {
	caCert, err := ca.GetCert()
	if err != nil {
		return nil, nil, fmt.Errorf("parsing CA certificate: %w", err)
	}

	caKeyAny, err := ca.GetKey()
	if err != nil {
		return nil, nil, errors.New("parsing CA key failed")
	}

	caKey, ok := caKeyAny.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("CA key cannot sign")
	}

	key, serial, err := newKeyAndSerial()
	if err != nil {
		return nil, nil, err
	}

	now := time.Now()
	tmpl := &stdx509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(1, 0, 0),
		KeyUsage:     stdx509.KeyUsageDigitalSignature | stdx509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usages,
		IPAddresses:  ips,
		DNSNames:     dns,
	}

	der, err := stdx509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("issuing certificate for %s: %w", cn, err)
	}

	keyDER, err := stdx509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// etcdAdminTLS is the client TLS Talos's machined uses towards etcd: a client certificate
// from the etcd CA (t:internal/pkg/etcd/client.go, NewClient with the admin certificate).
func etcdAdminTLS(ca *x509.PEMEncodedCertificateAndKey) (*tls.Config, error) {
	crt, key, err := signCert(ca, "talos-etcd-admin", nil, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}, nil, nil)
	if err != nil {
		return nil, err
	}

	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, err
	}

	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Crt)

	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// writeEtcdPKI writes the member's peer/server certificate (both usages, as Talos's etcd
// certificates controller issues them, t:internal/app/machined/pkg/controllers/secrets/etcd.go)
// under the machine's directory, 0600.
func (m *Machine) writeEtcdPKI(ca *x509.PEMEncodedCertificateAndKey, hostname string) (dir string, err error) {
	dir = filepath.Join(m.dir, "pki", "etcd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}

	crt, key, err := signCert(ca, hostname, nil,
		[]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth, stdx509.ExtKeyUsageClientAuth},
		[]net.IP{net.ParseIP(m.IP()), net.ParseIP("127.0.0.1")}, []string{hostname, hostLocalhost})
	if err != nil {
		return "", err
	}

	for name, b := range map[string][]byte{"ca.crt": ca.Crt, "member.crt": crt, "member.key": key} {
		if err := writeFileAtomic(filepath.Join(dir, name), b, secretFileMode); err != nil {
			return "", err
		}
	}

	return dir, nil
}

// etcdEmbedConfig is the member's configuration: the machine's own address, TLS both ways
// with client certificates required, as Talos's etcd service runs it
// (t:internal/app/machined/pkg/system/services/etcd.go argsForInit / argsForControlPlane).
func (m *Machine) etcdEmbedConfig(ca *x509.PEMEncodedCertificateAndKey, hostname string) (*embed.Config, error) {
	pki, err := m.writeEtcdPKI(ca, hostname)
	if err != nil {
		return nil, err
	}

	cfg := embed.NewConfig()
	cfg.Name = hostname
	cfg.Dir = m.etcdDataDir()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(etcdLogger(m.Name()))

	peer, _ := url.Parse(m.etcdPeerURL())
	client, _ := url.Parse(m.etcdClientURL())
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenMetricsUrls = nil
	cfg.InitialClusterToken = nameTalosemu

	cfg.ClientTLSInfo.CertFile = filepath.Join(pki, "member.crt")
	cfg.ClientTLSInfo.KeyFile = filepath.Join(pki, "member.key")
	cfg.ClientTLSInfo.TrustedCAFile = filepath.Join(pki, "ca.crt")
	cfg.ClientTLSInfo.ClientCertAuth = true
	cfg.PeerTLSInfo = cfg.ClientTLSInfo

	// keep the memory small: many members share one process
	cfg.SnapshotCount = 10000
	cfg.QuotaBackendBytes = 256 << 20

	return cfg, nil
}

// startEtcd starts the member with cluster as initial cluster ("" = only itself) and waits
// until it serves; a no-op when it runs already.
func (m *Machine) startEtcd(ctx context.Context, state, cluster string) error {
	m.etcdStartMu.Lock()
	defer m.etcdStartMu.Unlock()

	if m.runningEtcd() != nil {
		return nil
	}

	return m.startEtcdLocked(ctx, state, cluster)
}

func (m *Machine) startEtcdLocked(ctx context.Context, state, cluster string) error {
	cfgp := m.activeConfig()

	ca := etcdCA(cfgp)
	if ca == nil {
		return errors.New("no etcd CA in the machine configuration")
	}

	m.mu.Lock()
	hostname := m.hostnameLocked()
	m.mu.Unlock()

	cfg, err := m.etcdEmbedConfig(ca, hostname)
	if err != nil {
		return err
	}

	cfg.ClusterState = state
	if cluster == "" {
		cluster = hostname + "=" + m.etcdPeerURL()
	}

	cfg.InitialCluster = cluster

	tlsConf, err := etcdAdminTLS(ca)
	if err != nil {
		return err
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}

	t := time.NewTimer(60 * time.Second)
	defer t.Stop()

	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()

		return fmt.Errorf("etcd failed: %w", err)
	case <-ctx.Done():
		e.Close()

		return ctx.Err()
	case <-t.C:
		e.Close()

		return errors.New("etcd did not become ready within 60s")
	}

	m.etcdMu.Lock()
	m.etcd = &etcdRunning{e: e, tlsConf: tlsConf, id: uint64(e.Server.MemberID())}
	m.etcdMu.Unlock()

	_ = put(context.Background(), m.st, etcdres.NewMember(etcdres.NamespaceName, etcdres.LocalMemberID), func(r *etcdres.Member) {
		r.TypedSpec().MemberID = etcdres.FormatMemberID(uint64(e.Server.MemberID()))
	})

	m.world.logf("machine %s: etcd member %x started (%s)", m.Name(), uint64(e.Server.MemberID()), state)

	return nil
}

// stopEtcd stops the member (its ports close); the data directory stays.
func (m *Machine) stopEtcd() {
	m.etcdMu.Lock()
	r := m.etcd
	m.etcd = nil
	m.etcdMu.Unlock()

	if r != nil {
		r.e.Close()
	}
}

func (m *Machine) runningEtcd() *etcdRunning {
	m.etcdMu.Lock()
	defer m.etcdMu.Unlock()

	return m.etcd
}

// etcdClient opens a client to endpoints with the admin certificate of this machine's etcd CA.
func etcdClient(ctx context.Context, tlsConf *tls.Config, endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		TLS:                  tlsConf.Clone(),
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Context:              ctx,
		Logger:               zap.NewNop(),
	})
}

// localEtcdClient talks to this machine's member only (Talos's NewLocalClient).
func (m *Machine) localEtcdClient(ctx context.Context) (*clientv3.Client, *etcdRunning, error) {
	r := m.runningEtcd()
	if r == nil {
		return nil, nil, errEtcdNotRunning
	}

	c, err := etcdClient(ctx, r.tlsConf, []string{m.etcdClientURL()})

	return c, r, err
}

// clusterEtcdClient talks to every control plane of the world with the same etcd CA that
// runs a member (Talos's NewClientFromControlPlaneIPs).
func (m *Machine) clusterEtcdClient(ctx context.Context) (*clientv3.Client, error) {
	r := m.runningEtcd()
	if r == nil {
		return nil, errEtcdNotRunning
	}

	eps := []string{m.etcdClientURL()}

	for _, p := range m.etcdPeers() {
		eps = append(eps, p.etcdClientURL())
	}

	return etcdClient(ctx, r.tlsConf, eps)
}

// etcdPeers are the other machines of the world whose running config carries the same etcd
// CA and that run a member: the control planes Talos would discover.
func (m *Machine) etcdPeers() []*Machine {
	ca := etcdCA(m.activeConfig())
	if ca == nil {
		return nil
	}

	var out []*Machine

	for _, o := range m.world.machines {
		if o == m || o.runningEtcd() == nil {
			continue
		}

		oca := etcdCA(o.activeConfig())
		if oca != nil && string(oca.Crt) == string(ca.Crt) {
			out = append(out, o)
		}
	}

	return out
}

// etcdServiceState is the etcd service as ServiceList reports it. Talos's
// service runner is Preparing while a service's pre-step runs
// (t:internal/app/machined/pkg/system/service_runner.go, StatePreparing
// "Running pre state"); etcd's pre-step waits there only while the data
// directory is empty, to join a cluster or to be bootstrapped
// (t:internal/app/machined/pkg/system/services/etcd.go argsForControlPlane:
// buildInitialCluster runs only `if ok` = IsDirEmpty(EtcdDataPath), and
// BootstrapEtcd restarts the service). With data, the pre-step ends at once
// and etcd runs, healthy only once the member serves: so a member that
// cannot reach a quorum (it joined a cluster whose other members went away)
// is Running and unhealthy, not Preparing.
func (m *Machine) etcdServiceState() serviceState {
	const id = "etcd"

	switch {
	case m.runningEtcd() != nil:
		return serviceState{id: id, state: stateRunning, healthy: true, message: "Health check successful"}
	case dirNotEmpty(m.etcdDataDir()):
		return serviceState{id: id, state: stateRunning, message: "etcd is starting from its data directory; the member does not serve"}
	default:
		return serviceState{id: id, state: "Preparing", message: "Waiting for etcd bootstrap or join"}
	}
}

func dirNotEmpty(dir string) bool {
	entries, err := os.ReadDir(dir)

	return err == nil && len(entries) > 0
}

// etcdService runs while a control plane is running: an existing data directory starts the
// member again; otherwise the member waits for Bootstrap or joins a running peer as a learner
// and then promotes itself (t:internal/app/machined/pkg/system/services/etcd.go, addMember
// and promoteMember).
func (m *Machine) etcdService(ctx context.Context) {
	for ctx.Err() == nil {
		if m.runningEtcd() != nil {
			return
		}

		m.etcdMu.Lock()
		left := m.etcdLeft
		m.etcdMu.Unlock()

		if left {
			return
		}

		var err error

		switch {
		case dirNotEmpty(filepath.Join(m.etcdDataDir(), "member")):
			err = m.startEtcd(ctx, embed.ClusterStateFlagExisting, "")
		case len(m.etcdPeers()) > 0:
			err = m.joinEtcd(ctx)
		default:
			// waiting for Bootstrap or for a peer
		}

		if err != nil {
			m.world.logf("machine %s: etcd: %v", m.Name(), err)
		}

		if m.runningEtcd() != nil {
			return
		}

		sleepCtx(ctx, 500*time.Millisecond)
	}
}

func (m *Machine) joinEtcd(ctx context.Context) error {
	ca := etcdCA(m.activeConfig())
	if ca == nil {
		return errors.New("no etcd CA in the machine configuration")
	}

	tlsConf, err := etcdAdminTLS(ca)
	if err != nil {
		return err
	}

	var eps []string
	for _, p := range m.etcdPeers() {
		eps = append(eps, p.etcdClientURL())
	}

	c, err := etcdClient(ctx, tlsConf, eps)
	if err != nil {
		return err
	}

	defer c.Close() //nolint:errcheck

	opCtx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), 10*time.Second)
	defer cancel()

	list, err := c.MemberList(opCtx)
	if err != nil {
		return fmt.Errorf("listing members: %w", err)
	}

	self := m.etcdPeerURL()

	m.mu.Lock()
	hostname := m.hostnameLocked()
	m.mu.Unlock()

	// As Talos's addMember (t:internal/app/machined/pkg/system/services/etcd.go): this
	// runs only with an empty data directory, so a member of the same name is this
	// machine's previous life (its data was wiped, say by a non-graceful reset) and is
	// removed first; a learner with this peer URL and no name yet is an earlier attempt
	// of this join, which is taken up; any other member with this peer URL is a conflict.
	removed := false

	for _, mem := range list.Members {
		if mem.Name == hostname {
			if _, err := c.MemberRemove(opCtx, mem.ID); err != nil {
				return fmt.Errorf("error removing self from the member list: %w", err)
			}

			removed = true
		}
	}

	if removed {
		if list, err = c.MemberList(opCtx); err != nil {
			return fmt.Errorf("listing members: %w", err)
		}
	}

	var selfID uint64

	resp, err := c.MemberAddAsLearner(opCtx, []string{self})

	switch {
	case err == nil:
		selfID = resp.Member.ID
		list.Members = resp.Members
	case errors.Is(err, rpctypes.ErrPeerURLExist):
		for _, mem := range list.Members {
			if len(mem.PeerURLs) == 1 && mem.PeerURLs[0] == self && mem.IsLearner && mem.Name == "" {
				selfID = mem.ID
			}
		}

		if selfID == 0 {
			return fmt.Errorf("member already exists with the same peer URLs %q, but is not a learner: %w", self, err)
		}
	default:
		return fmt.Errorf("adding learner: %w", err)
	}

	var parts []string

	for _, mem := range list.Members {
		name := mem.Name
		if mem.ID == selfID {
			name = hostname
		} else if name == "" {
			name = fmt.Sprintf("unstarted-%x", mem.ID)
		}

		for _, u := range mem.PeerURLs {
			parts = append(parts, name+"="+u)
		}
	}

	if err := m.startEtcd(ctx, embed.ClusterStateFlagExisting, strings.Join(parts, ",")); err != nil {
		return err
	}

	// promote once the learner has caught up
	for ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.MemberPromote(pctx, selfID)

		pcancel()

		if err == nil || errors.Is(err, rpctypes.ErrMemberNotLearner) || strings.Contains(err.Error(), "not a learner") {
			return nil
		}

		sleepCtx(ctx, 500*time.Millisecond)
	}

	return nil
}

// leaveEtcd removes this member from the cluster, stops it and wipes its data, as a graceful
// reset does before wiping (t:internal/pkg/etcd/etcd.go LeaveCluster).
func (m *Machine) leaveEtcd(ctx context.Context) error {
	r := m.runningEtcd()
	if r == nil {
		return errEtcdNotRunning
	}

	// Ask the other members: a member that removes itself stops its server as
	// soon as the change applies, so an answer through its own endpoint can be
	// "server stopped" although the removal was committed.
	var eps []string
	for _, p := range m.etcdPeers() {
		eps = append(eps, p.etcdClientURL())
	}

	if len(eps) == 0 {
		eps = []string{m.etcdClientURL()}
	}

	c, err := etcdClient(ctx, r.tlsConf, eps)
	if err != nil {
		return err
	}

	defer c.Close() //nolint:errcheck

	// etcd refuses a membership change until the remaining members have been connected for a
	// while ("unhealthy cluster"); Talos retries (t:internal/pkg/etcd/etcd.go LeaveCluster)
	deadline := time.Now().Add(30 * time.Second)

	for {
		opCtx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), 10*time.Second)
		_, err := c.MemberRemove(opCtx, r.id)

		cancel()

		if err == nil || errors.Is(err, rpctypes.ErrMemberNotFound) {
			break
		}

		// A retry after "server stopped" finds the member gone (ErrMemberNotFound).
		transient := errors.Is(err, rpctypes.ErrUnhealthy) || errors.Is(err, rpctypes.ErrNoLeader) ||
			errors.Is(err, rpctypes.ErrStopped)
		if time.Now().After(deadline) || !transient {
			return fmt.Errorf("removing member: %w", err)
		}

		if !sleepCtx(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}

	m.etcdMu.Lock()
	m.etcdLeft = true
	m.etcdMu.Unlock()

	m.stopEtcd()

	return os.RemoveAll(m.etcdDataDir())
}

// restoreEtcd restores the uploaded snapshot into a fresh single-member data directory, as
// t:internal/app/machined/pkg/system/services/etcd.go recoverFromSnapshot does: etcdutl's
// Status of the snapshot first ("error verifying snapshot"), then its Restore with the
// member's name and peer URLs as the only member, no revision bump, then the upload is
// removed. The restored cluster holds exactly what the snapshot held: keys written after it
// are gone.
func (m *Machine) restoreEtcd(skipHashCheck bool) error {
	m.mu.Lock()
	hostname := m.hostnameLocked()
	m.mu.Unlock()

	manager := snapshot.NewV3(zap.NewNop())

	st, err := manager.Status(m.etcdSnapshotPath())
	if err != nil {
		return fmt.Errorf("error verifying snapshot: %w", err)
	}

	m.world.logf("machine %s: recovering etcd from snapshot: hash %08x, revision %d, total keys %d, total size %d",
		m.Name(), st.Hash, st.Revision, st.TotalKey, st.TotalSize)

	err = manager.Restore(snapshot.RestoreConfig{
		SnapshotPath:        m.etcdSnapshotPath(),
		Name:                hostname,
		OutputDataDir:       m.etcdDataDir(),
		PeerURLs:            []string{m.etcdPeerURL()},
		InitialCluster:      hostname + "=" + m.etcdPeerURL(),
		InitialClusterToken: nameTalosemu,
		SkipHashCheck:       skipHashCheck,
	})
	if err != nil {
		_ = os.RemoveAll(m.etcdDataDir())

		return fmt.Errorf("error recovering etcd from snapshot: %w", err)
	}

	return os.Remove(m.etcdSnapshotPath())
}

// etcdLogger is an embedded etcd member's logger: silent but for what ends
// the process. zap's Fatal exits whatever the core, so with zap.NewNop() an
// etcd member that could not go on (out of file descriptors, say) ended the
// whole emulator with exit status 1 and no word.
func etcdLogger(machine string) *zap.Logger {
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())

	return zap.New(zapcore.NewCore(enc, zapcore.Lock(os.Stderr), zapcore.DPanicLevel)).With(zap.String("talosemu-etcd", machine))
}
