package talosemu

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The flows of the pods the pod runner runs (GET /flows on the control API): what a network
// policy for them has to allow, seen rather than declared. Three sources, each where the
// emulator sees the connection:
//
//   - inbound from an API server: the egress proxy's CONNECTs to a pod address (webhooks,
//     aggregated APIs, an OIDC issuer served by a pod);
//   - inbound from the kubelet: the probes;
//   - outbound: the established TCP connections of every pod process, sampled from /proc
//     (the process's socket inodes in /proc/<pid>/fd, their ends in /proc/net/tcp and tcp6)
//     every flowSample, skipping the connections a pod accepted on a port it listens on;
//     and each connection a machine's Talos API accepts, attributed when it is accepted to
//     the pod process holding its other end.
//
// A flow is recorded once per pod, direction, port and peer, with how often it was seen (an
// open egress-proxy tunnel counts again at every sample). A short outbound connection to a
// peer other than a Talos API, opened and closed between two samples, is not seen; every
// long-lived one (watches, gRPC channels, kept-alive HTTP) is.

// flowSample is how often the pods' outbound connections are read.
const flowSample = 500 * time.Millisecond

// maxFlows bounds the record: a world that runs for days keeps the first ones.
const maxFlows = 4096

// Peers of inbound flows that have no address of their own here.
const (
	// PeerKubeAPIServer is an API server, calling through its egress proxy.
	PeerKubeAPIServer = "kube-apiserver"
	// PeerKubelet is the pod's kubelet, probing.
	PeerKubelet = "kubelet"
)

// PodFlow is one flow at a pod the pod runner runs.
type PodFlow struct {
	// Namespace, Pod, Labels and HostNetwork are the pod's at this end.
	Namespace   string            `json:"namespace"`
	Pod         string            `json:"pod"`
	Labels      map[string]string `json:"labels,omitempty"`
	HostNetwork bool              `json:"hostNetwork,omitempty"`
	// Node is the pod's Node.
	Node string `json:"node"`
	// Inbound: the pod accepted the connection; otherwise it opened it.
	Inbound bool `json:"inbound"`
	// Port is the server's port: the pod's own when Inbound, the peer's otherwise.
	Port int `json:"port"`
	// Peer is the other end: PeerKubeAPIServer or PeerKubelet when Inbound, the address
	// dialled otherwise.
	Peer string `json:"peer"`
	// PeerPod is namespace/name of the pod Peer is an address of, if one of this world's.
	PeerPod    string            `json:"peerPod,omitempty"`
	PeerLabels map[string]string `json:"peerLabels,omitempty"`
	// PeerMachine names the machine Peer is the address of; PeerNode is its Node, when its
	// kubelet runs (it is a Node of the cluster), and PeerControlPlane says it is a control
	// plane.
	PeerMachine      string `json:"peerMachine,omitempty"`
	PeerNode         string `json:"peerNode,omitempty"`
	PeerControlPlane bool   `json:"peerControlPlane,omitempty"`
	// Seen counts the observations (samples, CONNECTs, probes).
	Seen int `json:"seen"`
}

func (f *PodFlow) key() string {
	return fmt.Sprintf("%s/%s %t %d %s", f.Namespace, f.Pod, f.Inbound, f.Port, f.Peer)
}

// flowLog is the World's record of flows.
type flowLog struct {
	mu     sync.Mutex
	flows  map[string]*PodFlow
	order  []string
	active map[string]int // open egress-proxy tunnels by flow: seen again at every sample
}

// add records f once more and returns its key.
func (l *flowLog) add(f *PodFlow) string {
	l.mu.Lock()
	defer l.mu.Unlock()

	k := f.key()
	if cur, ok := l.flows[k]; ok {
		cur.Seen++

		return k
	}

	if l.flows == nil {
		l.flows = map[string]*PodFlow{}
	}

	if len(l.flows) >= maxFlows {
		return k
	}

	f.Seen = 1
	l.flows[k] = f
	l.order = append(l.order, k)

	return k
}

// open counts a tunnel of flow k as open (delta +1) or closed (-1).
func (l *flowLog) open(k string, delta int) {
	l.mu.Lock()
	defer l.mu.Unlock()

	if l.active == nil {
		l.active = map[string]int{}
	}

	l.active[k] += delta
	if l.active[k] <= 0 {
		delete(l.active, k)
	}
}

// seeOpen counts every flow with an open tunnel as seen once more: an API server keeps its
// tunnel to a webhook and sends every call through it.
func (l *flowLog) seeOpen() {
	l.mu.Lock()
	defer l.mu.Unlock()

	for k := range l.active {
		if f, ok := l.flows[k]; ok {
			f.Seen++
		}
	}
}

// Flows are the flows seen so far, in the order first seen.
func (w *World) Flows() []PodFlow {
	w.flowLog.mu.Lock()
	defer w.flowLog.mu.Unlock()

	out := make([]PodFlow, 0, len(w.flowLog.order))
	for _, k := range w.flowLog.order {
		out = append(out, *w.flowLog.flows[k])
	}

	return out
}

// podEnd is what a flow says of the pod at its end.
func (p *runPod) flowEnd() PodFlow {
	p.mu.Lock()
	defer p.mu.Unlock()

	f := PodFlow{Namespace: p.ns, Pod: p.name, Node: p.r.node}
	if p.pod != nil {
		f.Labels = p.pod.Labels
		f.HostNetwork = p.pod.Spec.HostNetwork
	}

	return f
}

// recordInbound records a connection to port of the pod at loopback address addr from peer;
// it returns the flow's key, "" when addr is no pod's.
func (w *World) recordInbound(addr string, port int, peer string) string {
	p := w.podAt(addr)
	if p == nil {
		return ""
	}

	f := p.flowEnd()
	f.Inbound, f.Port, f.Peer = true, port, peer

	return w.flowLog.add(&f)
}

// podAt is the running pod whose loopback address is addr (nil if none).
func (w *World) podAt(addr string) *runPod {
	for _, p := range w.runningPods() {
		p.mu.Lock()
		hit := p.loopback == addr && p.pod != nil && !p.pod.Spec.HostNetwork
		p.mu.Unlock()

		if hit {
			return p
		}
	}

	return nil
}

// runningPods are the pods of every pod runner; no lock is held when it returns.
func (w *World) runningPods() []*runPod {
	var out []*runPod

	for _, r := range w.podRunners() {
		r.mu.Lock()
		for _, p := range r.pods {
			out = append(out, p)
		}
		r.mu.Unlock()
	}

	return out
}

func (w *World) podRunners() []*podRunner {
	w.netMu.Lock()
	defer w.netMu.Unlock()

	out := make([]*podRunner, 0, len(w.runners))
	for _, r := range w.runners {
		out = append(out, r)
	}

	return out
}

// sampleFlows reads the pods' outbound connections every flowSample until ctx ends.
func (w *World) sampleFlows(ctx context.Context) {
	t := time.NewTicker(flowSample)
	defer t.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.flowLog.seeOpen()
			w.sampleOnce()
		}
	}
}

// podProcs are the running processes of the pods.
func (w *World) podProcs() []procOf {
	var procs []procOf

	for _, p := range w.runningPods() {
		// inits and ctrs are set when the runPod is made (newRunPod) and never change
		for _, c := range append(slices.Clone(p.inits), p.ctrs...) {
			c.mu.Lock()
			if c.running && c.pgid > 0 {
				procs = append(procs, procOf{p: p, pid: c.pgid})
			}
			c.mu.Unlock()
		}
	}

	return procs
}

// procOf is a pod process to sample.
type procOf struct {
	p   *runPod
	pid int
}

func (w *World) sampleOnce() {
	procs := w.podProcs()

	if len(procs) == 0 {
		return
	}

	socks, err := readTCPTables()
	if err != nil {
		return
	}

	for _, pr := range procs {
		inodes := socketInodes(pr.pid)

		listens := map[uint16]bool{}
		for ino := range inodes {
			if s, ok := socks[ino]; ok && s.listen {
				listens[s.local.Port()] = true
			}
		}

		for ino := range inodes {
			s, ok := socks[ino]
			if !ok || !s.established || listens[s.local.Port()] {
				continue
			}

			f := pr.p.flowEnd()
			f.Port, f.Peer = int(s.remote.Port()), s.remote.Addr().String()
			w.describePeer(&f)
			w.flowLog.add(&f)
		}
	}
}

// flowListener attributes each connection it accepts to the pod process that opened it, if
// one did: a Talos API call lasts milliseconds, too short for the sampler to see.
type flowListener struct {
	net.Listener

	w *World
}

func (l flowListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		go l.w.attribute(c.RemoteAddr(), c.LocalAddr())
	}

	return c, err
}

// listenFlows wraps lis when the pod runner runs pods.
func (w *World) listenFlows(lis net.Listener) net.Listener {
	if w.podBinDir == "" {
		return lis
	}

	return flowListener{Listener: lis, w: w}
}

// attribute records the connection from client to server as an outbound flow of the pod
// process that holds the client's socket.
func (w *World) attribute(client, server net.Addr) {
	ca, err1 := netip.ParseAddrPort(client.String())
	sa, err2 := netip.ParseAddrPort(server.String())

	if err1 != nil || err2 != nil {
		return
	}

	ca, sa = netip.AddrPortFrom(ca.Addr().Unmap(), ca.Port()), netip.AddrPortFrom(sa.Addr().Unmap(), sa.Port())

	// no pod process runs: nobody to attribute it to, and no need to read
	// every socket of the host at each accepted connection
	procs := w.podProcs()
	if len(procs) == 0 {
		return
	}

	socks, err := readTCPTables()
	if err != nil {
		return
	}

	inode := ""

	for ino, s := range socks {
		if s.local == ca && s.remote == sa {
			inode = ino

			break
		}
	}

	if inode == "" {
		return
	}

	for _, pr := range procs {
		if socketInodes(pr.pid)[inode] {
			f := pr.p.flowEnd()
			f.Port, f.Peer = int(sa.Port()), sa.Addr().String()
			w.describePeer(&f)
			w.flowLog.add(&f)

			return
		}
	}
}

// describePeer says which pod or machine f's peer address is.
func (w *World) describePeer(f *PodFlow) {
	if p := w.podAt(f.Peer); p != nil {
		e := p.flowEnd()
		f.PeerPod, f.PeerLabels = e.Namespace+"/"+e.Pod, e.Labels

		return
	}

	w.netMu.Lock()
	running := map[*Machine]bool{}
	for m := range w.runners {
		running[m] = true
	}
	w.netMu.Unlock()

	for _, m := range w.machines {
		if m.IP() != f.Peer {
			continue
		}

		f.PeerMachine = m.Name()
		if running[m] {
			f.PeerNode = m.nodeName()
			f.PeerControlPlane = m.isControlPlane()
		}

		return
	}
}

// tcpSocket is one line of /proc/net/tcp or tcp6.
type tcpSocket struct {
	local, remote       netip.AddrPort
	listen, established bool
}

// readTCPTables reads the host's TCP sockets by inode.
func readTCPTables() (map[string]tcpSocket, error) {
	out := map[string]tcpSocket{}

	for _, path := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(path)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}

			return nil, err
		}

		sc := bufio.NewScanner(f)
		sc.Scan() // the header

		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 {
				continue
			}

			local, err1 := procAddr(fields[1])
			remote, err2 := procAddr(fields[2])

			if err1 != nil || err2 != nil || fields[9] == "0" {
				continue
			}

			// st: 01 ESTABLISHED, 0A LISTEN (include/net/tcp_states.h)
			out[fields[9]] = tcpSocket{local: local, remote: remote, established: fields[3] == "01", listen: fields[3] == "0A"}
		}

		_ = f.Close()
	}

	return out, nil
}

// procAddr parses an address of /proc/net/tcp{,6}: the address as the kernel stores it,
// printed as 32-bit words in host order (little-endian here), then the port in hex.
func procAddr(s string) (netip.AddrPort, error) {
	host, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}

	raw, err := hex.DecodeString(host)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}

	for i := 0; i+4 <= len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}

	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q", s)
	}

	a, _ := netip.AddrFromSlice(raw)

	return netip.AddrPortFrom(a.Unmap(), uint16(port)), nil
}

// socketInodes are the inodes of the sockets process pid holds.
func socketInodes(pid int) map[string]bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)

	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}

	out := map[string]bool{}

	for _, e := range entries {
		target, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue
		}

		if ino, ok := strings.CutPrefix(target, "socket:["); ok {
			out[strings.TrimSuffix(ino, "]")] = true
		}
	}

	return out
}
