package talosemu

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/api/storage"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Power states reported by the control API.
const (
	PowerOn  = "on"
	PowerOff = "off"
)

// Machine is one emulated Talos machine.
type Machine struct {
	world *World
	dir   string
	st    state.State

	mu            sync.Mutex
	p             persisted
	maintCert     tls.Certificate
	apiCert       *tls.Certificate
	clientCAs     *stdx509.CertPool
	proxyCert     *tls.Certificate     // apid's client certificate for forwarding (control planes only; proxy.go)
	active        talosconfig.Provider // running config (may be a TRY config)
	persistentCfg talosconfig.Provider // config on the STATE partition
	stage         runtime.MachineStage
	lis           net.Listener
	srv           *grpc.Server
	hung          bool
	held          []net.Conn
	seqCancel     context.CancelFunc
	seqWG         sync.WaitGroup
	rollback      *time.Timer
	closed        bool

	applyMu sync.Mutex
	// loseApplyAnswer makes the next ApplyConfiguration take effect and its answer be lost
	// (LoseNextApplyAnswer)
	loseApplyAnswer atomic.Bool
	// ignoreReboot makes the next Reboot be answered and not acted on.
	ignoreReboot atomic.Bool

	// etcd member and Kubernetes control plane (etcd.go, kube.go, svc.go)
	etcdStartMu sync.Mutex
	etcdMu      sync.Mutex
	etcd        *etcdRunning
	etcdLeft    bool
	svcMu       sync.Mutex
	svcCancel   context.CancelFunc
	svcWG       sync.WaitGroup
	kube        *kubeControlPlane
	kubeletUp   atomic.Bool // the kubelet registered its Node and runs (kwok.go)

	pulls // the ImageService pulls it served (kubeversions.go)

	rpcMu         sync.Mutex
	rpcCounts     map[string]int
	forwardCounts map[string]int // requests this machine's apid forwarded to another node (proxy.go)
	shutdowns     []ShutdownCall // the Shutdown requests handled (shutdownlog.go)

	// events is machined's runtime event stream of the current boot, actor the actor ID of
	// the lifecycle request being run (events.go)
	events *eventStream
	actor  string

	// bootedAt is when the current boot started: the service logs and the
	// kernel log are anchored to it (nodeinfo.go).
	bootedAt time.Time
}

// Name returns the machine's name.
func (m *Machine) Name() string { return m.p.Hardware.Name }

// Address returns host:port of the machine's Talos API.
func (m *Machine) Address() string {
	return net.JoinHostPort(m.p.Hardware.Address, strconv.Itoa(m.p.Hardware.Port))
}

// IP returns the machine's address without the port.
func (m *Machine) IP() string { return m.p.Hardware.Address }

// MaintenanceFingerprint returns the SPKI fingerprint of the maintenance certificate, as
// machinery's WithMaintenanceMode expects it.
func (m *Machine) MaintenanceFingerprint() string {
	m.mu.Lock()
	defer m.mu.Unlock()

	return fingerprint(m.maintCert)
}

// UUID returns the SMBIOS UUID the machine reports.
func (m *Machine) UUID() string { return m.p.Hardware.UUID }

func newMachine(ctx context.Context, w *World, hw hwSpec, dir string) (*Machine, error) {
	if err := os.MkdirAll(dir, stateDirFileMode); err != nil {
		return nil, fmt.Errorf("machine %s: creating state directory: %w", hw.Name, err)
	}

	p, err := loadPersisted(dir)
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", hw.Name, err)
	}

	if p == nil {
		p = &persisted{Hardware: hw, Powered: true, Slot: "A"}
	} else {
		// the address and port come from the current spec; the identity from the state
		p.Hardware.Address, p.Hardware.Port, p.Hardware.Role = hw.Address, hw.Port, hw.Role
	}

	m := &Machine{world: w, dir: dir, p: *p, rpcCounts: map[string]int{}, forwardCounts: map[string]int{}}

	m.maintCert, err = loadOrCreateMaintenanceCert(dir, hw.Address, false)
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", hw.Name, err)
	}

	b, err := readOptional(filepath.Join(dir, fileConfig))
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", hw.Name, err)
	}

	if b != nil {
		cfg, err := configloader.NewFromBytes(b)
		if err != nil {
			return nil, fmt.Errorf("machine %s: stored config %s does not load: %w", hw.Name, filepath.Join(dir, fileConfig), err)
		}

		m.persistentCfg = cfg
	}

	m.st, err = newMachineState(ctx)
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", hw.Name, err)
	}

	if err := seedHardware(ctx, m.st, m.p.Hardware); err != nil {
		return nil, fmt.Errorf("machine %s: %w", hw.Name, err)
	}

	if err := m.p.save(dir); err != nil {
		return nil, fmt.Errorf("machine %s: %w", hw.Name, err)
	}

	return m, nil
}

func (m *Machine) durations() Durations {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.p.Durations != nil {
		return m.p.Durations.withDefaults()
	}

	return m.world.durations()
}

// inMaintenance is true while the active config is not complete for boot, the definition
// Talos uses (m:config/container/container.go CompleteForBoot).
func (m *Machine) inMaintenance() bool {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.inMaintenanceLocked()
}

func (m *Machine) inMaintenanceLocked() bool {
	return m.active == nil || !m.active.CompleteForBoot()
}

func (m *Machine) countRPC(method string) {
	m.rpcMu.Lock()
	m.rpcCounts[method]++
	m.rpcMu.Unlock()
}

// RPCCounts returns how many calls of each full gRPC method the machine received.
func (m *Machine) RPCCounts() map[string]int {
	m.rpcMu.Lock()
	defer m.rpcMu.Unlock()

	return maps.Clone(m.rpcCounts)
}

// ResetRPCCounts sets every counter (handled and forwarded) back to zero.
func (m *Machine) ResetRPCCounts() {
	m.rpcMu.Lock()
	m.rpcCounts = map[string]int{}
	m.forwardCounts = map[string]int{}
	m.rpcMu.Unlock()
}

func (m *Machine) countForward(method string, targets int) {
	m.rpcMu.Lock()
	m.forwardCounts[method] += targets
	m.rpcMu.Unlock()
}

// ForwardedCounts returns how many calls of each full gRPC method this machine's apid
// forwarded to other nodes (one per target node) instead of handling them: RPCCounts counts
// only the calls the machine handled itself.
func (m *Machine) ForwardedCounts() map[string]int {
	m.rpcMu.Lock()
	defer m.rpcMu.Unlock()

	return maps.Clone(m.forwardCounts)
}

// tlsForClient picks the server TLS mode per handshake: maintenance (self-signed, no client
// certificate) or configured (mutual TLS against the OS CA, ExtKeyUsage checked), as apid
// does (t:internal/app/apid/pkg/provider/provider.go ServerConfig, t:internal/app/apid/service.go).
func (m *Machine) tlsForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.inMaintenanceLocked() {
		return &tls.Config{
			Certificates: []tls.Certificate{m.maintCert},
			ClientAuth:   tls.NoClientCert,
			NextProtos:   []string{"h2"},
			MinVersion:   tls.VersionTLS12,
		}, nil
	}

	if m.apiCert == nil {
		if err := m.refreshAPICertLocked(); err != nil {
			return nil, err
		}
	}

	return &tls.Config{
		Certificates:           []tls.Certificate{*m.apiCert},
		ClientAuth:             tls.RequireAndVerifyClientCert,
		ClientCAs:              m.clientCAs,
		VerifyPeerCertificate:  verifyExtKeyUsage,
		VerifyConnection:       verifyConnectionExtKeyUsage,
		SessionTicketsDisabled: true,
		NextProtos:             []string{"h2"},
		MinVersion:             tls.VersionTLS12,
	}, nil
}

// refreshAPICertLocked issues the configured-mode certificate. Control planes hold the OS CA
// key in machine.ca; workers only get the certificate (m:config/generate/worker.go) and obtain
// theirs from trustd on a control plane, which the world emulates with the keys it has seen.
func (m *Machine) refreshAPICertLocked() error {
	m.apiCert, m.clientCAs, m.proxyCert = nil, nil, nil

	if m.active == nil || m.active.Machine() == nil {
		return errors.New("no machine configuration")
	}

	sec := m.active.Machine().Security()
	ca := sec.IssuingCA()

	if ca == nil || len(ca.Crt) == 0 {
		return errors.New("machine configuration has no machine.ca")
	}

	if len(ca.Key) > 0 {
		m.world.rememberCA(ca)
	} else {
		// a worker's certificate comes from trustd on a control plane, signed
		// with that control plane's issuing CA, which the worker's config
		// accepts but need not name as machine.ca: while a CA rotation
		// switches the issuing CA, a worker may name the new one before any
		// control plane issues with it (t:internal/app/trustd/internal/reg/reg.go
		// Certificate; t:internal/app/machined/pkg/controllers/secrets/api.go
		// generateWorker)
		issuer := m.world.lookupCA(ca.Crt)
		for _, accepted := range sec.AcceptedCAs() {
			if issuer != nil {
				break
			}

			issuer = m.world.lookupCA(accepted.Crt)
		}

		if issuer == nil {
			return errors.New("no control plane issued an API certificate for this machine yet (trustd has no OS CA key)")
		}

		ca = issuer
	}

	cert, err := issueServerCert(ca, m.p.Hardware.Address, m.hostnameLocked())
	if err != nil {
		return err
	}

	pool := stdx509.NewCertPool()
	pool.AppendCertsFromPEM(ca.Crt)
	pool.AppendCertsFromPEM(sec.IssuingCA().Crt)

	for _, accepted := range sec.AcceptedCAs() {
		pool.AppendCertsFromPEM(accepted.Crt)
	}

	m.apiCert, m.clientCAs = &cert, pool

	// only control planes forward requests: they alone get a client certificate
	// (t:internal/app/machined/pkg/controllers/secrets/api.go; t:internal/app/apid/service.go
	// builds no remote backend factory without one)
	if m.active.Machine().Type().IsControlPlane() && len(sec.IssuingCA().Key) > 0 {
		pc, err := issueProxyClientCert(ca, m.hostnameLocked())
		if err != nil {
			return err
		}

		m.proxyCert = &pc
	}

	return nil
}

func (m *Machine) hostnameLocked() string {
	if m.active != nil {
		if hc := m.active.NetworkHostnameConfig(); hc != nil && hc.Hostname() != "" {
			return hc.Hostname()
		}

		if raw := m.active.RawV1Alpha1(); raw != nil && raw.MachineConfig != nil && raw.MachineConfig.MachineNetwork != nil && //nolint:staticcheck // legacy field still honoured
			raw.MachineConfig.MachineNetwork.NetworkHostname != "" { //nolint:staticcheck // legacy field still honoured
			return raw.MachineConfig.MachineNetwork.NetworkHostname //nolint:staticcheck // legacy field still honoured
		}
	}

	return m.p.Hardware.Hostname
}

func (m *Machine) runningVersionLocked() (string, string) {
	if m.p.Installed {
		return m.p.InstalledVersion, m.p.InstalledSchematic
	}

	return m.p.Hardware.TalosVersion, m.p.Hardware.Schematic
}

// startAPI opens the listener and serves the Talos API (or, when hung, accepts TCP and never
// answers).
func (m *Machine) startAPILocked() error {
	if m.lis != nil {
		return nil
	}

	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", m.Address())
	if err != nil {
		return fmt.Errorf("machine %s: cannot listen on %s: %w", m.Name(), m.Address(), err)
	}

	lis = m.world.listenFlows(lis)
	m.lis = lis

	if m.hung {
		go m.holdConnections(lis)

		return nil
	}

	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{GetConfigForClient: m.tlsForClient, MinVersion: tls.VersionTLS12})),
		grpc.MaxRecvMsgSize(constants.GRPCMaxMessageSize),
		grpc.ChainUnaryInterceptor(m.unaryInterceptor()),
		grpc.ChainStreamInterceptor(m.streamInterceptor()),
	)

	api := &apiServer{m: m}
	machine.RegisterMachineServiceServer(srv, api)
	machine.RegisterLifecycleServiceServer(srv, &lifecycleServer{m: m})
	machine.RegisterImageServiceServer(srv, &imageServer{m: m})
	storage.RegisterStorageServiceServer(srv, &storageServer{m: m})
	clusterapi.RegisterClusterServiceServer(srv, &clusterServer{m: m})
	cosiv1alpha1.RegisterStateServer(srv, server.NewState(state.Filter(discoveryReads{CoreState: m.st, m: m}, accessPolicy(m.st))))

	m.srv = srv

	go srv.Serve(lis) //nolint:errcheck // returns when stopped

	return nil
}

func (m *Machine) holdConnections(lis net.Listener) {
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}

		m.mu.Lock()
		m.held = append(m.held, c)
		m.mu.Unlock()
	}
}

// detachAPILocked takes the listener and server away from the machine and returns the function
// that stops them. Call it after releasing m.mu: a graceful stop waits for in-flight handlers,
// which may need m.mu themselves.
func (m *Machine) detachAPILocked() func() {
	srv, lis, held := m.srv, m.lis, m.held
	m.srv, m.lis, m.held = nil, nil, nil

	return func() {
		if lis != nil {
			_ = lis.Close()
		}

		for _, c := range held {
			_ = c.Close()
		}

		if srv == nil {
			return
		}

		done := make(chan struct{})

		go func() {
			srv.GracefulStop()
			close(done)
		}()

		t := time.NewTimer(200 * time.Millisecond)
		defer t.Stop()

		select {
		case <-done:
		case <-t.C:
			srv.Stop()
			<-done
		}
	}
}

// sequence runs fn as the machine's only lifecycle sequence, cancelling the previous one.
func (m *Machine) sequence(fn func(ctx context.Context)) {
	m.mu.Lock()
	defer m.mu.Unlock()

	m.sequenceLocked(fn)
}

func (m *Machine) sequenceLocked(fn func(ctx context.Context)) {
	if m.closed {
		return
	}

	if m.seqCancel != nil {
		m.seqCancel()
	}

	ctx, cancel := context.WithCancel(context.Background())
	m.seqCancel = cancel

	m.seqWG.Add(1)

	go func() {
		defer m.seqWG.Done()

		fn(ctx)
	}()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}

	t := time.NewTimer(d)
	defer t.Stop()

	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (m *Machine) setStage(stage runtime.MachineStage, ready bool) {
	m.mu.Lock()
	m.stage = stage
	m.mu.Unlock()

	var unmet []runtime.UnmetCondition
	if !ready && (stage == runtime.MachineStageRunning || stage == runtime.MachineStageBooting) {
		unmet = []runtime.UnmetCondition{{Name: "services", Reason: "some services are not ready"}}
	}

	_ = setStage(context.Background(), m.st, stage, ready, unmet)

	if stage == runtime.MachineStageRunning && ready {
		m.startServices()
		m.publishServices(machine.ServiceStateEvent_RUNNING, "Health check successful", "")
	}

	m.publishStage(stage, ready, unmet)

	if stage == runtime.MachineStageRunning || stage == runtime.MachineStageMaintenance {
		m.publishSequence("boot", machine.SequenceEvent_STOP, "")
	}
}

// Stage returns the current machine stage.
func (m *Machine) Stage() runtime.MachineStage {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.stage
}

// boot brings the machine up: a new boot ID, the pending upgrade (or its fallback), the
// persisted config as the active one, the API, then running or maintenance.
func (m *Machine) boot(ctx context.Context) error {
	m.mu.Lock()

	m.p.Powered = true
	m.p.Boots++

	if m.p.WipeEphemeralAtBoot {
		m.p.WipeEphemeralAtBoot = false

		if err := m.wipeEphemeral(); err != nil {
			m.world.logf("machine %s: wiping EPHEMERAL of the replaced disk: %v", m.Name(), err)
		}
	}

	m.etcdMu.Lock()
	m.etcdLeft = false
	m.etcdMu.Unlock()

	m.p.BootID = newBootID()
	m.bootedAt = time.Now().UTC()
	// a new machined: a new, empty event stream
	m.events, m.actor = newEventStream(), ""
	m.events.publish(&machine.SequenceEvent{Sequence: "boot", Action: machine.SequenceEvent_START}, "")

	if pend := m.p.Pending; pend != nil {
		m.p.Pending = nil

		if m.p.FailNextUpgrade {
			// the new slot does not boot; the bootloader falls back to the previous one
			m.p.FailNextUpgrade = false
			m.p.LastUpgradeFailed = true
		} else {
			m.p.PreviousVersion, m.p.PreviousSchematic = m.p.InstalledVersion, m.p.InstalledSchematic
			m.p.InstalledVersion, m.p.InstalledSchematic = pend.Version, pend.Schematic
			m.p.LastUpgradeFailed = false

			if m.p.Slot == "B" {
				m.p.Slot = "A"
			} else {
				m.p.Slot = "B"
			}
		}
	}

	m.active = m.persistentCfg
	if m.active != nil && m.active.Machine() != nil {
		if err := m.refreshAPICertLocked(); err != nil {
			m.apiCert = nil
		}
	}

	version, schematic := m.runningVersionLocked()
	hostname := m.hostnameLocked()
	active, persistent := m.active, m.persistentCfg
	systemDisk := m.p.SystemDisk
	if err := m.p.save(m.dir); err != nil {
		m.mu.Unlock()

		return err
	}

	m.mu.Unlock()

	bg := context.Background()
	if err := setVersionResources(bg, m.st, version, schematic); err != nil {
		return err
	}

	if err := setConfigResources(bg, m.st, active, persistent, hostname); err != nil {
		return err
	}

	if err := setHostname(bg, m.st, hostname); err != nil {
		return err
	}

	if err := setSystemDisk(bg, m.st, systemDisk); err != nil {
		return err
	}

	if err := setIdentity(bg, m.st, seed(m.p.Hardware.Name, "node-id")[:32]); err != nil {
		return err
	}

	if err := m.setNetworkStatus(bg); err != nil {
		return err
	}

	if err := m.refreshDerived(bg); err != nil {
		return err
	}

	m.setStage(runtime.MachineStageBooting, false)

	m.mu.Lock()

	var err error
	if ctx.Err() == nil && !m.closed {
		err = m.startAPILocked()
	}

	m.mu.Unlock()

	if err != nil {
		return err
	}

	if !sleepCtx(ctx, m.durations().Boot.D()) {
		return nil
	}

	m.mu.Lock()
	maintenance, installed := m.inMaintenanceLocked(), m.p.Installed
	m.mu.Unlock()

	switch {
	case maintenance:
		m.setStage(runtime.MachineStageMaintenance, false)
	case !installed:
		// a config is stored but the install did not finish (talosemu stopped mid-install,
		// or a config was staged in maintenance): install now
		m.install(ctx)
	default:
		m.setStage(runtime.MachineStageRunning, true)
	}

	return nil
}

func (m *Machine) bootSeq(ctx context.Context) {
	if err := m.boot(ctx); err != nil {
		m.world.logf("machine %s: boot failed: %v", m.Name(), err)
	}
}

// goDown shows the shutdown stage for half of the reboot duration, then stops answering.
func (m *Machine) goDown(ctx context.Context, stage runtime.MachineStage) bool {
	actor := m.currentActor()

	m.setStage(stage, false)
	// the sequences' StopAllServices task (t:…/v1alpha1_sequencer_tasks.go), which talosctl's
	// shutdown and reset --wait watch for (t:cmd/talosctl/pkg/talos/action/tracker.go)
	m.publishTask("stopAllServices", machine.TaskEvent_START, actor)
	m.publishServices(machine.ServiceStateEvent_STOPPING, "Service is stopping", actor)
	m.stopServices()
	m.publishServices(machine.ServiceStateEvent_FINISHED, "Service finished successfully", actor)
	m.publishTask("stopAllServices", machine.TaskEvent_STOP, actor)

	if !sleepCtx(ctx, m.durations().Reboot.D()/2) {
		return false
	}

	m.mu.Lock()
	stop := m.detachAPILocked()
	m.mu.Unlock()
	stop()

	return true
}

func (m *Machine) rebootSeq(stage runtime.MachineStage, before func()) func(ctx context.Context) {
	return func(ctx context.Context) {
		if !m.goDown(ctx, stage) {
			return
		}

		if before != nil {
			before()
		}

		if !sleepCtx(ctx, m.durations().Reboot.D()/2) {
			return
		}

		m.bootSeq(ctx)
	}
}

func (m *Machine) powerOffSeq(stage runtime.MachineStage, before func()) func(ctx context.Context) {
	return func(ctx context.Context) {
		if !m.goDown(ctx, stage) {
			return
		}

		if before != nil {
			before()
		}

		m.mu.Lock()
		m.p.Powered = false
		err := m.p.save(m.dir)
		m.mu.Unlock()

		if err != nil {
			m.world.logf("machine %s: saving state: %v", m.Name(), err)
		}
	}
}

// PowerOff cuts the power at once: no shutdown stage, connections drop.
func (m *Machine) PowerOff() error {
	m.mu.Lock()

	if m.seqCancel != nil {
		m.seqCancel()
		m.seqCancel = nil
	}

	stop := m.detachAPILocked()
	m.p.Powered = false
	err := m.p.save(m.dir)
	m.mu.Unlock()

	stop()
	m.stopServices()

	return err
}

// PowerOn boots a powered-off machine; it is a no-op for a running one.
func (m *Machine) PowerOn() error {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.p.Powered && (m.lis != nil || m.seqCancel != nil) {
		return nil
	}

	m.sequenceLocked(m.bootSeq)

	return nil
}

// Powered reports whether the machine is powered on.
func (m *Machine) Powered() bool {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.p.Powered
}

// SetHung makes the machine accept TCP connections and never answer (true), or serve again.
func (m *Machine) SetHung(hung bool) error {
	m.mu.Lock()

	if m.hung == hung {
		m.mu.Unlock()

		return nil
	}

	serving := m.lis != nil
	stop := m.detachAPILocked()
	m.hung = hung
	m.mu.Unlock()

	stop()

	if !serving {
		return nil
	}

	m.mu.Lock()
	defer m.mu.Unlock()

	return m.startAPILocked()
}

// WipeSystemDisk erases the system disk (as if replaced): at its next boot the machine comes
// up in maintenance from its boot media, with the same identity, and with nothing of EPHEMERAL
// (a control plane's etcd data is gone: a full loss). A running machine's etcd member keeps
// its files until that boot.
func (m *Machine) WipeSystemDisk() error {
	m.mu.Lock()
	defer m.mu.Unlock()

	m.p.WipeEphemeralAtBoot = true

	return m.wipeSystemDiskLocked()
}

func (m *Machine) wipeSystemDiskLocked() error {
	m.p.Installed = false
	m.p.SystemDisk = ""
	m.p.InstalledVersion, m.p.InstalledSchematic = "", ""
	m.p.PreviousVersion, m.p.PreviousSchematic = "", ""
	m.p.Pending = nil
	m.p.Slot = "A"

	return m.wipeStateLocked()
}

func (m *Machine) wipeStateLocked() error {
	m.persistentCfg = nil

	if err := os.Remove(filepath.Join(m.dir, fileConfig)); err != nil && !os.IsNotExist(err) {
		return err
	}

	return m.p.save(m.dir)
}

// ReplaceMaintenanceCert generates a new maintenance key and certificate; the fingerprint
// changes.
func (m *Machine) ReplaceMaintenanceCert() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()

	cert, err := loadOrCreateMaintenanceCert(m.dir, m.p.Hardware.Address, true)
	if err != nil {
		return "", err
	}

	m.maintCert = cert

	return fingerprint(cert), nil
}

// LoseNextApplyAnswer makes the next ApplyConfiguration take effect as usual and then fail
// as a caller sees a connection that closed before the answer came: on a real node in
// maintenance mode the maintenance API stops as the node takes its configuration, and the
// answer to the send may never arrive. Not persisted: it is a fault of one call.
func (m *Machine) LoseNextApplyAnswer() { m.loseApplyAnswer.Store(true) }

// IgnoreNextReboot makes the next Reboot be answered and not acted on: the
// machine runs on, on its boot. It is what a controller that recorded a
// Reboot and died before sending it finds once it is back: a node that never
// went down (the call is counted, the reboot never starts).
func (m *Machine) IgnoreNextReboot() { m.ignoreReboot.Store(true) }

// FailNextUpgrade makes the next boot into an upgraded slot fail and fall back.
func (m *Machine) FailNextUpgrade(fail bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()

	m.p.FailNextUpgrade = fail

	return m.p.save(m.dir)
}

// SetDurations overrides the world's durations for this machine (nil restores them).
func (m *Machine) SetDurations(d *Durations) error {
	m.mu.Lock()
	defer m.mu.Unlock()

	m.p.Durations = d

	return m.p.save(m.dir)
}

func (m *Machine) close() {
	m.mu.Lock()
	m.closed = true

	if m.seqCancel != nil {
		m.seqCancel()
	}

	if m.rollback != nil {
		m.rollback.Stop()
	}

	stop := m.detachAPILocked()
	m.mu.Unlock()

	stop()
	m.seqWG.Wait()
	m.stopServices()
}

func newBootID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)

	s := hex.EncodeToString(b)

	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}
