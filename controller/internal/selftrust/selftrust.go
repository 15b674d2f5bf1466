// Package selftrust is what the controller's own Kubernetes client trusts:
// the CA it was configured with (a CA file is read again when it changes, as
// the kubelet refreshes the ServiceAccount volume's ca.crt from the
// kube-root-ca.crt ConfigMap), plus the CAs a CA rotation of the cluster
// Ichor runs in adds ahead of the switch (architecture, "Backup, recovery,
// certificates"; issue 24).
//
// Why it is needed: once a rotation's issue stage applies, the kube-apiserver
// presents a serving certificate of the new Kubernetes CA, while
// kube-root-ca.crt carries the new CA only after the kube-controller-manager
// restarted with it (Talos gives it the issuing CA alone as --root-ca-file,
// t:internal/app/machined/pkg/controllers/k8s/render_secrets_static_pod.go)
// and the kubelet refreshed the volume. A client that trusts only the file
// would lose the API server, and its leader Lease with it, in between.
package selftrust

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// recheck is how often the CA file is read again (on a request).
const recheck = 10 * time.Second

// Transport is the controller's own client transport: TLS trusting the
// configured CA and the added ones. Its methods are safe for concurrent use.
type Transport struct {
	caFile    string // the configured CA file, "" when the CA came as data
	caData    []byte // the configured CA data
	extraFile string // where the added CAs are kept across restarts, "" for none
	base      *tls.Config
	proxy     func(*http.Request) (*url.URL, error)
	dial      func(ctx context.Context, network, address string) (net.Conn, error)

	mu       sync.Mutex
	fileData []byte
	extra    []byte
	checked  time.Time
	current  *http.Transport
}

// Wrap returns cfg with its TLS trust in a Transport, and the Transport.
// extraFile keeps the added CAs across a restart of the process (an
// emptyDir survives a container restart); empty keeps them in memory only.
// A configuration without a CA of its own (the system's roots, an exec or
// auth provider, a custom transport, insecure) comes back unchanged with a
// nil Transport: there is nothing to add to.
func Wrap(cfg *rest.Config, extraFile string) (*rest.Config, *Transport, error) {
	tc := cfg.TLSClientConfig
	if cfg.Transport != nil || cfg.WrapTransport != nil || cfg.ExecProvider != nil || cfg.AuthProvider != nil || tc.Insecure ||
		(tc.CAFile == "" && len(tc.CAData) == 0) {
		return cfg, nil, nil
	}

	base, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("the Kubernetes client's TLS configuration: %w", err)
	}

	t := &Transport{caFile: tc.CAFile, caData: tc.CAData, extraFile: extraFile, base: base, proxy: cfg.Proxy, dial: cfg.Dial}
	if len(t.caData) > 0 {
		t.caFile = ""
	}

	if t.proxy == nil {
		t.proxy = http.ProxyFromEnvironment
	}

	if t.dial == nil {
		t.dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}

	if extraFile != "" {
		switch data, err := os.ReadFile(extraFile); {
		case err == nil:
			if _, perr := parse(data); perr != nil {
				return nil, nil, fmt.Errorf("%s: %w; delete the file to start without the CAs it added", extraFile, perr)
			}

			t.extra = data
		case !errors.Is(err, os.ErrNotExist):
			return nil, nil, fmt.Errorf("read the added CAs: %w", err)
		}
	}

	t.mu.Lock()
	err = t.refreshLocked(true)
	t.mu.Unlock()

	if err != nil {
		return nil, nil, err
	}

	out := rest.CopyConfig(cfg)
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.Transport, out.Proxy, out.Dial = t, nil, nil

	return out, t, nil
}

// RoundTrip sends req over the transport of the current trust.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.transport().RoundTrip(req)
}

// CloseIdleConnections closes the idle connections of the current transport.
func (t *Transport) CloseIdleConnections() {
	t.transport().CloseIdleConnections()
}

// Trust makes the client trust the CAs in pemCerts besides the configured
// CA, replacing what an earlier call added; empty takes them away. It
// returns once new connections trust them (and the extra file keeps them).
func (t *Transport) Trust(pemCerts []byte) error {
	if len(bytes.TrimSpace(pemCerts)) > 0 {
		if _, err := parse(pemCerts); err != nil {
			return err
		}
	}

	t.mu.Lock()
	defer t.mu.Unlock()

	if bytes.Equal(t.extra, pemCerts) {
		return nil
	}

	if err := t.keep(pemCerts); err != nil {
		return err
	}

	t.extra = bytes.Clone(pemCerts)

	return t.refreshLocked(true)
}

// Trusts reports whether new connections trust every certificate in pemCerts.
func (t *Transport) Trusts(pemCerts []byte) bool {
	want, err := parse(pemCerts)
	if err != nil {
		return false
	}

	t.mu.Lock()
	defer t.mu.Unlock()

	have, _ := parse(append(append([]byte{}, t.configured()...), append([]byte("\n"), t.extra...)...))
	for _, w := range want {
		found := false

		for _, h := range have {
			if h.Equal(w) {
				found = true

				break
			}
		}

		if !found {
			return false
		}
	}

	return true
}

// keep writes pemCerts to the extra file, atomically (a rename), or removes
// the file when there is nothing to keep.
func (t *Transport) keep(pemCerts []byte) error {
	if t.extraFile == "" {
		return nil
	}

	if len(bytes.TrimSpace(pemCerts)) == 0 {
		if err := os.Remove(t.extraFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove the added CAs: %w", err)
		}

		return nil
	}

	tmp, err := os.CreateTemp(filepath.Dir(t.extraFile), ".selftrust-*")
	if err != nil {
		return fmt.Errorf("keep the added CAs: %w", err)
	}

	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename

	if _, err := tmp.Write(pemCerts); err != nil {
		_ = tmp.Close()

		return fmt.Errorf("keep the added CAs: %w", err)
	}

	if err := tmp.Close(); err != nil {
		return fmt.Errorf("keep the added CAs: %w", err)
	}

	// CA certificates are public: readable like the ServiceAccount's ca.crt.
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { //nolint:gosec // public certificates
		return fmt.Errorf("keep the added CAs: %w", err)
	}

	if err := os.Rename(tmp.Name(), t.extraFile); err != nil {
		return fmt.Errorf("keep the added CAs: %w", err)
	}

	return nil
}

// configured is the configured CA: the data, or the file as last read.
func (t *Transport) configured() []byte {
	if t.caFile == "" {
		return t.caData
	}

	return t.fileData
}

func (t *Transport) transport() *http.Transport {
	t.mu.Lock()
	defer t.mu.Unlock()

	if t.caFile != "" && time.Since(t.checked) >= recheck {
		// An unreadable or broken file keeps the trust as it was (the kubelet
		// swaps the volume's files atomically; a later read sees them whole).
		_ = t.refreshLocked(false)
	}

	return t.current
}

// refreshLocked reads the CA file again and builds a new transport when the
// trust changed (or force). The caller holds t.mu.
func (t *Transport) refreshLocked(force bool) error {
	if t.caFile != "" {
		t.checked = time.Now()

		data, err := os.ReadFile(t.caFile)
		if err != nil {
			return fmt.Errorf("read the Kubernetes CA file: %w", err)
		}

		if _, err := parse(data); err != nil {
			return fmt.Errorf("the Kubernetes CA file %s: %w", t.caFile, err)
		}

		if !bytes.Equal(data, t.fileData) {
			t.fileData, force = data, true
		}
	}

	if !force && t.current != nil {
		return nil
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(t.configured()) {
		return errors.New("the Kubernetes client's CA holds no certificate")
	}

	pool.AppendCertsFromPEM(t.extra)

	tc := t.base.Clone()
	tc.RootCAs = pool

	next := utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               t.proxy,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tc,
		MaxIdleConnsPerHost: 25,
		DialContext:         t.dial,
	})

	if old := t.current; old != nil {
		// Idle connections of the old trust go; new requests dial with the new one.
		old.CloseIdleConnections()
	}

	t.current = next

	return nil
}

// parse returns the certificates of a PEM bundle, refusing one without any.
func parse(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate

	for rest := data; ; {
		var block *pem.Block

		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}

		if block.Type != "CERTIFICATE" {
			continue
		}

		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("a certificate does not parse: %w", err)
		}

		certs = append(certs, c)
	}

	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate in it")
	}

	return certs, nil
}
