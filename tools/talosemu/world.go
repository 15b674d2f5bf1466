// Package talosemu emulates Talos Linux machines that speak Talos's own gRPC API (machinery's
// generated server interfaces and the COSI State service), so machinery's client works
// against them unchanged. See README.md for the spec format and the control API.
package talosemu

import (
	"context"
	"errors"
	"fmt"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/siderolabs/crypto/x509"
)

// World is a set of emulated machines running in this process, with a control API.
type World struct {
	machines []*Machine
	byName   map[string]*Machine

	mu  sync.Mutex
	dur Durations
	cas map[string]*x509.PEMEncodedCertificateAndKey

	kubernetes      bool
	kubeAssets      string
	heartbeat       time.Duration
	networkNeedsCNI bool
	singleAPIServer bool
	apiRestartDelay time.Duration

	control     *http.Server
	controlAddr string
	logger      *log.Logger

	kwokState        // kwok.go: one kwok controller per emulated cluster
	releaseState     // upgrade.go: the release source and the installer tags that exist
	kubeVersionState // kubeversions.go: the Kubernetes versions and their binaries
	discoveryState   // discovery.go: the discovery service
	podNetState      // podnet.go: the pod runner's addresses and the API server's egress proxy
	apiServerState   // kube.go: the machines whose API server runs
}

// Options tune Start.
type Options struct {
	// Logger receives one line per notable event; nil discards them.
	Logger *log.Logger
	// NoControlAPI skips the control API listener.
	NoControlAPI bool
	// Kubernetes runs a real Kubernetes control plane (kube-apiserver, controller-manager,
	// scheduler) on bootstrapped control planes and the kubelet simulation on every
	// configured machine. Off by default: etcd members run either way.
	Kubernetes bool
	// KubeAssets is the directory with kube-apiserver, kube-controller-manager and
	// kube-scheduler; empty means $KUBEBUILDER_ASSETS.
	KubeAssets string
	// KubeAssetsByVersion names, per Kubernetes version ("v1.36.3"), a directory with that
	// version's binaries, for versions not beside KubeAssets (kubeversions.go).
	KubeAssetsByVersion map[string]string
	// SingleAPIServer runs one control plane (apiserver, controller-manager, scheduler) per
	// cluster, on its first control plane in spec order, instead of one per control plane.
	SingleAPIServer bool
	// APIServerRestartDelay is how long the API server stays away when a change of its
	// settings restarts it (15–45 s on real hardware; default 0).
	APIServerRestartDelay time.Duration
	// PodBinDir turns the pod runner on (podrunner.go): a pod bound to an emulated Node whose
	// container image is one of Ichor's (repository ending in ichor-controller, ichor-ui or
	// ichor-installer) runs as a local process of the binary of that name in this directory
	// (`go tool task build` writes them to bin/); kwok keeps simulating every other pod.
	// Empty: kwok simulates every pod.
	PodBinDir string
	// PodSubnet is the loopback range the pod runner's processes listen on, one address per
	// pod (default 127.244.0.0/16).
	PodSubnet string
	// PodEnv is added to the environment of every pod process ("NAME=value"; the pod's own
	// env wins).
	PodEnv []string
	// KubeletHeartbeat is how often an emulated kubelet renews its Node's Lease (default 5 s;
	// a real kubelet's is 10 s). The Node's status is posted at twice that, and the
	// controller-manager's node-monitor-grace-period is four times that (at least 20 s). A
	// world of thousands of machines on one host sets it longer: each heartbeat is four
	// requests to the one API server.
	KubeletHeartbeat time.Duration
	// NetworkNeedsCNI makes each kubelet report its Node NotReady, as a real kubelet on a
	// cluster without a CNI does (containerd's "cni plugin not initialized"), until a Ready
	// pod of a CNI's DaemonSet (cniPodLabels) runs on the Node. Off, every Node is Ready while
	// its machine runs, whatever the cluster's network.
	NetworkNeedsCNI bool
}

// Start creates (or reopens) every machine of spec under dir, one subdirectory per machine,
// boots the powered-on ones and starts the control API. Close stops everything.
func Start(ctx context.Context, spec *Spec, dir string, opts ...Options) (*World, error) {
	var opt Options
	if len(opts) > 0 {
		opt = opts[0]
	}

	hws, err := spec.resolve()
	if err != nil {
		return nil, err
	}

	if dir == "" {
		return nil, errors.New("a state directory is required")
	}

	if !opt.NoControlAPI && spec.ControlAddress != "" {
		if err := checkLoopback(spec.ControlAddress); err != nil {
			return nil, err
		}
	}

	w := &World{
		byName:          make(map[string]*Machine, len(hws)),
		dur:             spec.Durations.withDefaults(),
		cas:             map[string]*x509.PEMEncodedCertificateAndKey{},
		logger:          opt.Logger,
		kubernetes:      opt.Kubernetes,
		kubeAssets:      opt.KubeAssets,
		singleAPIServer: opt.SingleAPIServer,
		apiRestartDelay: opt.APIServerRestartDelay,
		heartbeat:       opt.KubeletHeartbeat,
		networkNeedsCNI: opt.NetworkNeedsCNI,
	}

	if w.heartbeat <= 0 {
		w.heartbeat = leaseRenew
	}

	w.byVersion = maps.Clone(opt.KubeAssetsByVersion)
	w.kwokCtx, w.kwokCancel = context.WithCancel(context.WithoutCancel(ctx))

	if w.kubeAssets == "" {
		w.kubeAssets = os.Getenv("KUBEBUILDER_ASSETS")
	}

	if w.kubernetes {
		if err := checkKubeAssets(w.kubeAssets); err != nil {
			return nil, err
		}
	}

	// fail early and clearly on a port clash, before anything starts
	for _, hw := range hws {
		addr := net.JoinHostPort(hw.Address, fmt.Sprint(hw.Port))

		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("machine %s: address %s is not free: %w", hw.Name, addr, err)
		}

		_ = lis.Close()
	}

	if err := w.startPodNet(ctx, opt); err != nil {
		return nil, err
	}

	for _, hw := range hws {
		m, err := newMachine(ctx, w, hw, filepath.Join(dir, hw.Name))
		if err != nil {
			w.Close()

			return nil, err
		}

		w.machines = append(w.machines, m)
		w.byName[hw.Name] = m
	}

	// control planes first, so workers find their OS CA key (emulated trustd)
	for _, m := range w.machines {
		if m.persistentCfg != nil && m.persistentCfg.Machine() != nil {
			if ca := m.persistentCfg.Machine().Security().IssuingCA(); ca != nil && len(ca.Key) > 0 {
				w.rememberCA(ca)
			}
		}
	}

	for _, m := range w.machines {
		if !m.p.Powered {
			continue
		}

		if err := m.bootStart(); err != nil {
			w.Close()

			return nil, err
		}
	}

	if !opt.NoControlAPI {
		addr := spec.ControlAddress
		if addr == "" {
			addr = "127.0.0.1:0"
		}

		if err := w.startControl(addr); err != nil {
			w.Close()

			return nil, err
		}
	}

	return w, nil
}

// bootStart starts the API synchronously (so Start reports a listen error) and lets the rest of
// the boot run as the machine's sequence.
func (m *Machine) bootStart() error {
	m.mu.Lock()
	err := m.startAPILocked()
	m.mu.Unlock()

	if err != nil {
		return err
	}

	m.sequence(m.bootSeq)

	return nil
}

// Machines returns the machines in spec order.
func (w *World) Machines() []*Machine { return w.machines }

// Machine returns the machine with the given name.
func (w *World) Machine(name string) (*Machine, error) {
	m, ok := w.byName[name]
	if !ok {
		names := make([]string, 0, len(w.byName))
		for n := range w.byName {
			names = append(names, n)
		}

		sort.Strings(names)

		if len(names) > 5 {
			names = append(names[:5], "…")
		}

		return nil, fmt.Errorf("unknown machine %q (machines: %v)", name, names)
	}

	return m, nil
}

// ControlURL returns the base URL of the control API ("" when disabled).
func (w *World) ControlURL() string {
	if w.controlAddr == "" {
		return ""
	}

	return "http://" + w.controlAddr
}

// SetDurations changes the durations of every machine that has no override.
func (w *World) SetDurations(d Durations) {
	w.mu.Lock()
	w.dur = d.withDefaults()
	w.mu.Unlock()
}

func (w *World) durations() Durations {
	w.mu.Lock()
	defer w.mu.Unlock()

	return w.dur
}

func (w *World) rememberCA(ca *x509.PEMEncodedCertificateAndKey) {
	w.mu.Lock()
	w.cas[string(ca.Crt)] = ca
	w.mu.Unlock()
}

func (w *World) lookupCA(crt []byte) *x509.PEMEncodedCertificateAndKey {
	w.mu.Lock()
	defer w.mu.Unlock()

	return w.cas[string(crt)]
}

func (w *World) logf(format string, args ...any) {
	if w.logger != nil {
		w.logger.Printf(format, args...)
	}
}

// Close stops the control API and every machine. State stays on disk.
func (w *World) Close() {
	if w.control != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = w.control.Shutdown(ctx)

		cancel()
	}

	w.stopKwok()

	var wg sync.WaitGroup

	for _, m := range w.machines {
		wg.Add(1)

		go func() {
			defer wg.Done()

			m.close()
		}()
	}

	wg.Wait()

	w.stopPodNet()
}
