package talosemu

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The pods' network. Every pod the pod runner (podrunner.go) runs has two addresses:
//
//   - its pod address, status.podIP: an address of its Node's podCIDR, as a CNI plugin gives
//     it; it is what EndpointSlices, and so Services, webhooks and aggregated APIs, point at
//     (the API server refuses loopback addresses in EndpointSlices,
//     k:pkg/apis/discovery/validation/validation.go validateEndpoints → ValidateNonSpecialIP);
//   - its loopback address, one of Options.PodSubnet, which its processes listen on and which
//     the downward API's status.podIP gives them.
//
// Nothing on this machine routes pod addresses, so the API servers reach them through an
// egress proxy: each kube-apiserver runs with an EgressSelectorConfiguration whose `cluster`
// egress (webhooks, aggregated APIs, kubelets, the pods/services proxy;
// k8s.io/apiserver/pkg/server/egressselector) is an HTTP CONNECT proxy served here (on an
// abstract Unix socket), the way
// Konnectivity serves it on real clusters. The proxy maps a pod address to its loopback
// address, dials loopback addresses (the Nodes') as they are, and refuses every other
// address: nothing the emulator runs ever sends a packet off this machine.
// hostNetwork pods use their Node's address for both.

// defaultPodSubnet is the loopback range of the pods' processes when Options.PodSubnet is empty.
const defaultPodSubnet = "127.244.0.0/16"

// podNetState is the World's part for the pods' addresses and the egress proxy.
type podNetState struct {
	podBinDir string
	podEnv    []string
	podSubnet netip.Prefix

	netMu      sync.Mutex
	loopbackOf map[string]string // pod address → loopback address
	loopUsed   map[string]bool   // loopback addresses given to pods
	runners    map[*Machine]*podRunner

	egressLis net.Listener
	// svcProxyLis is the service proxy's (svcproxy.go).
	svcProxyLis net.Listener
	egressWG    sync.WaitGroup
	egressStop  context.CancelFunc

	flowLog flowLog // flows.go: the flows the pods use
}

// startPodNet checks the pod runner's options and starts the egress proxy (Kubernetes only).
func (w *World) startPodNet(ctx context.Context, opt Options) error {
	if !w.kubernetes {
		return nil
	}

	w.loopbackOf, w.loopUsed, w.runners = map[string]string{}, map[string]bool{}, map[*Machine]*podRunner{}

	if opt.PodBinDir != "" {
		dir, err := filepath.Abs(opt.PodBinDir)
		if err != nil {
			return err
		}

		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("pod binaries: %s is not a directory (Options.PodBinDir / --pod-bin-dir; `go tool task build` writes bin/)", opt.PodBinDir)
		}

		w.podBinDir = dir
	}

	w.podEnv = opt.PodEnv

	subnet := opt.PodSubnet
	if subnet == "" {
		subnet = defaultPodSubnet
	}

	pfx, err := netip.ParsePrefix(subnet)
	if err != nil || !pfx.Addr().Is4() || !netip.MustParsePrefix("127.0.0.0/8").Contains(pfx.Addr()) || pfx.Bits() < 8 || pfx.Bits() > 30 {
		return fmt.Errorf("pod subnet %q: must be an IPv4 range of /8 to /30 inside 127.0.0.0/8 (Options.PodSubnet / --pod-subnet)", subnet)
	}

	w.podSubnet = pfx.Masked()

	// an abstract Unix socket: nothing on disk, no port; kube-apiserver v1.37 cannot dial an
	// HTTPConnect proxy over TCP without TLS (k8s.io/apiserver/pkg/server/egressselector
	// getTLSConfig dereferences the absent tlsConfig), over a Unix socket it needs none
	b := make([]byte, 8)
	_, _ = rand.Read(b)

	lis, err := (&net.ListenConfig{}).Listen(ctx, "unix", fmt.Sprintf("@talosemu-egress-%d-%x", os.Getpid(), b))
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}

	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.egressLis, w.egressStop = lis, cancel

	w.egressWG.Add(1)

	go func() {
		defer w.egressWG.Done()

		w.serveEgress(pctx, lis)
	}()

	if err := w.startServiceProxy(pctx); err != nil {
		return err
	}

	if w.podBinDir != "" {
		w.egressWG.Add(1)

		go func() {
			defer w.egressWG.Done()

			w.sampleFlows(pctx)
		}()
	}

	return nil
}

// stopPodNet stops the egress proxy (World.Close).
func (w *World) stopPodNet() {
	if w.egressStop == nil {
		return
	}

	w.egressStop()
	_ = w.egressLis.Close()

	if w.svcProxyLis != nil {
		_ = w.svcProxyLis.Close()
	}
	w.egressWG.Wait()
	w.egressStop = nil
}

// egressSelectorConfig is the API servers' EgressSelectorConfiguration
// (k8s.io/apiserver/pkg/apis/apiserver/v1beta1); %s is the proxy's socket.
const egressSelectorConfig = `apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
  - name: cluster
    connection:
      proxyProtocol: HTTPConnect
      transport:
        uds:
          udsName: "%s"
`

// writeEgressConfig writes the EgressSelectorConfiguration of the API servers into dir and
// returns its path: the `cluster` egress goes through the world's egress proxy.
func (w *World) writeEgressConfig(dir string) (string, error) {
	if w.egressLis == nil {
		return "", errors.New("the egress proxy does not run")
	}

	b := fmt.Appendf(nil, egressSelectorConfig, w.egressLis.Addr().String())
	p := filepath.Join(dir, "egress-selector.yaml")

	return p, writeFileAtomic(p, b, secretFileMode)
}

// serveEgress accepts the API servers' CONNECT requests.
func (w *World) serveEgress(ctx context.Context, lis net.Listener) {
	var conns sync.WaitGroup
	defer conns.Wait()

	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}

		conns.Add(1)

		go func() {
			defer conns.Done()

			w.egressConn(ctx, c)
		}()
	}
}

// egressConn answers one CONNECT: 200 and a tunnel to the target, or an error status.
func (w *World) egressConn(ctx context.Context, c net.Conn) {
	defer c.Close() //nolint:errcheck

	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))

	br := bufio.NewReader(c)

	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}

	_ = c.SetReadDeadline(time.Time{})

	reply := func(code int, msg string) {
		_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Length: %d\r\n\r\n%s", code, http.StatusText(code), len(msg), msg)
	}

	if req.Method != http.MethodConnect {
		reply(http.StatusMethodNotAllowed, "talosemu egress proxy: CONNECT only")

		return
	}

	target, err := w.egressTarget(req.Host)
	if err != nil {
		reply(http.StatusForbidden, err.Error())

		return
	}

	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	up, err := (&net.Dialer{}).DialContext(dctx, "tcp", target)

	cancel()

	if err != nil {
		reply(http.StatusBadGateway, err.Error())

		return
	}

	defer up.Close() //nolint:errcheck

	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}

	if host, port, err := net.SplitHostPort(target); err == nil {
		n, _ := strconv.Atoi(port)
		if k := w.recordInbound(host, n, PeerKubeAPIServer); k != "" {
			w.flowLog.open(k, 1)
			defer w.flowLog.open(k, -1)
		}
	}

	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}

	pipe(ctx, c, up)
}

// egressTarget maps host:port of a CONNECT: a pod address to its loopback address, a
// loopback address to itself, a Service's ClusterIP to a ready endpoint (svcproxy.go);
// anything else is refused.
func (w *World) egressTarget(hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", fmt.Errorf("talosemu egress proxy: bad target %q", hostport)
	}

	if l := w.podLoopback(host); l != "" {
		return net.JoinHostPort(l, port), nil
	}

	if a, err := netip.ParseAddr(host); err == nil && a.IsLoopback() {
		return hostport, nil
	}

	// A ClusterIP (the service proxy's CONNECTs, svcproxy.go).
	if n, err := strconv.Atoi(port); err == nil {
		if t, err := w.serviceTarget(context.Background(), host, n); err != nil || t != "" {
			return t, err
		}
	}

	return "", fmt.Errorf("talosemu egress proxy: no pod run by talosemu has address %s", host)
}

// podLoopback is the loopback address of the pod with address ip ("" if none).
func (w *World) podLoopback(ip string) string {
	w.netMu.Lock()
	defer w.netMu.Unlock()

	return w.loopbackOf[ip]
}

// errPodIPTaken is allocLoopback's answer when another pod of this world has the pod address.
var errPodIPTaken = errors.New("the pod address is another pod's")

// allocLoopback takes a free address of the pod subnet for the pod with address podIP and
// records the mapping: not given to another pod of this world, not a machine's, and with no
// listening socket on it (another world, another program). The pod address is checked and
// taken under the same lock, so two pods set up at once never get the same one (they did:
// both were given the top of the podCIDR, and the egress proxy sent the first pod's traffic
// to the second).
func (w *World) allocLoopback(podIP string) (string, error) {
	listening := listeningAddrs()

	w.netMu.Lock()
	defer w.netMu.Unlock()

	if _, taken := w.loopbackOf[podIP]; taken {
		return "", errPodIPTaken
	}

	machines := map[string]bool{}
	for _, m := range w.machines {
		machines[m.IP()] = true
	}

	first := w.podSubnet.Addr().Next()

	for a := first; w.podSubnet.Contains(a) && a.Next().IsValid() && w.podSubnet.Contains(a.Next()); a = a.Next() {
		s := a.String()
		if w.loopUsed[s] || machines[s] || listening[s] {
			continue
		}

		w.loopUsed[s] = true
		w.loopbackOf[podIP] = s

		return s, nil
	}

	return "", fmt.Errorf("pod subnet %s has no free address left", w.podSubnet)
}

// releaseLoopback forgets a pod's addresses.
func (w *World) releaseLoopback(podIP, loopback string) {
	w.netMu.Lock()
	defer w.netMu.Unlock()

	if w.loopbackOf[podIP] == loopback {
		delete(w.loopbackOf, podIP)
	}

	delete(w.loopUsed, loopback)
}

// listeningAddrs returns the IPv4 addresses with a listening TCP socket (/proc/net/tcp).
func listeningAddrs() map[string]bool {
	out := map[string]bool{}

	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return out
	}
	defer f.Close() //nolint:errcheck

	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st ...; local_address is hex, little-endian: 0100007F:1F90
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != "0A" {
			continue
		}

		hostHex, _, ok := strings.Cut(fields[1], ":")
		if !ok || len(hostHex) != 8 {
			continue
		}

		b, err := hex.DecodeString(hostHex)
		if err != nil {
			continue
		}

		out[netip.AddrFrom4([4]byte{b[3], b[2], b[1], b[0]}).String()] = true
	}

	return out
}

// pipe copies both ways until one side ends or ctx ends.
func pipe(ctx context.Context, a, b io.ReadWriteCloser) {
	done := make(chan struct{}, 2)

	cp := func(dst, src io.ReadWriteCloser) {
		_, _ = io.Copy(dst, src)

		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}

		done <- struct{}{}
	}

	go cp(a, b)
	go cp(b, a)

	select {
	case <-done:
	case <-ctx.Done():
	}

	// the other direction may still carry a reply; give it a moment, then close both
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()

	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}

	_ = a.Close()
	_ = b.Close()
}

// egressArgs adds the kube-apiserver flags of the pods' network: the egress selector
// configuration and --enable-aggregator-routing, so that the API server resolves a webhook's
// or an APIService's Service to an endpoint (a pod address) instead of its ClusterIP
// (k:cmd/kube-apiserver/app/options … buildServiceResolver). Talos runs kube-apiserver
// without either: there kube-proxy routes ClusterIPs.
func (w *World) egressArgs(args map[string]string, dir string) error {
	p, err := w.writeEgressConfig(dir)
	if err != nil {
		return err
	}

	args["egress-selector-config-file"] = p
	args["enable-aggregator-routing"] = argTrue

	return nil
}
