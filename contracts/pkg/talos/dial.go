package talos

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"

	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// endpoint is address:port, port zero meaning Talos's apid port.
func endpoint(address string, port int) string {
	if port == 0 {
		port = constants.ApidPort
	}

	return net.JoinHostPort(address, strconv.Itoa(port))
}

// DialWithCertificate connects to the Talos API at address (port zero:
// Talos's apid port) with a client certificate, verifying the node against
// roots: the connection of a configured node, whose role (os:reader, os:admin)
// is the certificate's. TLS 1.3 is the floor, as apid's own (siderolabs/crypto
// tls/tls.go defaultConfig).
func DialWithCertificate(ctx context.Context, address string, port int, cert tls.Certificate, roots *stdx509.CertPool) (*talosclient.Client, error) {
	return dialTLS(ctx, address, port, &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      roots,
		MinVersion:   tls.VersionTLS13,
	})
}

// dialTLS is the machinery client of the node at address with tlsConfig, the
// installed interceptors (SetInterceptors) and extra's options.
func dialTLS(ctx context.Context, address string, port int, tlsConfig *tls.Config, extra ...talosclient.OptionFunc) (*talosclient.Client, error) {
	opts := append([]talosclient.OptionFunc{
		talosclient.WithEndpoints(endpoint(address, port)),
		talosclient.WithTLSConfig(tlsConfig),
	}, dialOptions()...)

	c, err := talosclient.New(ctx, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", address, err)
	}

	return c, nil
}

// ParseTalosconfig reads the client certificate and the CA of talosconfig's
// current context: what DialTalosconfig connects with, and what ichor-ui
// checks before it stores a pasted talosconfig. Its errors name fields only,
// never a value from the file, not even a context name.
func ParseTalosconfig(talosconfig []byte) (tls.Certificate, *stdx509.CertPool, error) {
	cfg, err := clientconfig.FromBytes(talosconfig)
	if err != nil {
		return tls.Certificate{}, nil, errors.New("the talosconfig is not valid YAML; give the file `talosctl config` writes")
	}

	if cfg.Context == "" {
		return tls.Certificate{}, nil, errors.New("the talosconfig names no current context; set `context:` to one of its contexts")
	}

	c, ok := cfg.Contexts[cfg.Context]
	if !ok || c == nil {
		return tls.Certificate{}, nil, errors.New("the talosconfig's current context is not among its contexts; set `context:` to one of them")
	}

	decode := func(field, v string) ([]byte, error) {
		if v == "" {
			return nil, fmt.Errorf("the talosconfig's current context has no %s; an os:admin talosconfig has ca, crt and key", field)
		}

		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("the talosconfig's current context: %s is not base64", field)
		}

		return b, nil
	}

	ca, err := decode("ca", c.CA)
	if err != nil {
		return tls.Certificate{}, nil, err
	}

	crt, err := decode("crt", c.Crt)
	if err != nil {
		return tls.Certificate{}, nil, err
	}

	key, err := decode("key", c.Key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}

	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return tls.Certificate{}, nil, errors.New("the talosconfig's current context: crt and key are not a certificate and its key")
	}

	roots := stdx509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return tls.Certificate{}, nil, errors.New("the talosconfig's current context: ca holds no PEM certificate")
	}

	return pair, roots, nil
}

// DialTalosconfig connects to the Talos API at address (port zero: Talos's
// apid port) with the credentials of talosconfig's current context. The
// talosconfig's endpoints and nodes are ignored: address is the only place it
// is used.
//
// Errors never quote the talosconfig (ParseTalosconfig).
func DialTalosconfig(ctx context.Context, address string, port int, talosconfig []byte) (*talosclient.Client, error) {
	pair, roots, err := ParseTalosconfig(talosconfig)
	if err != nil {
		return nil, err
	}

	return DialWithCertificate(ctx, address, port, pair, roots)
}

// DialTalosconfigNode is DialTalosconfig as a Node, for the reads Node
// offers (version, configuration, identity) with the operator's own
// credentials: `ichor adopt` reads a cluster Ichor has no bundle of yet.
func DialTalosconfigNode(ctx context.Context, address string, port int, talosconfig []byte) (*Node, error) {
	c, err := DialTalosconfig(ctx, address, port, talosconfig)
	if err != nil {
		return nil, err
	}

	return &Node{c: c, address: address}, nil
}
