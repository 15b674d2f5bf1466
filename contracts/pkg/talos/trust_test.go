package talos

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// versionServer answers Version, as apid does.
type versionServer struct {
	machine.UnimplementedMachineServiceServer
}

func (versionServer) Version(context.Context, *emptypb.Empty) (*machine.VersionResponse, error) {
	return &machine.VersionResponse{Messages: []*machine.Version{{Version: &machine.VersionInfo{Tag: "v1.14.1"}}}}, nil
}

// Rule (issue 24, the controller's own client through a CA rotation): a node
// that presents a certificate of a CA the bundle's nodes accept beside the
// bundle's own (talos.Accept, which machinestate.LoadTrust calls from the
// bundle Secret) is trusted by Dial; without it the connection fails
// verification, and Accept with nothing forgets it again. The node requires
// a client certificate of either CA, as apid with machine.acceptedCAs does.
func TestDialTrustsTheAcceptedCAs(t *testing.T) {
	clock := secrets.NewFixedClock(time.Now())

	b, err := bundle.Generate(clock, "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	other, err := bundle.Generate(clock, "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	// The node serves with a certificate of the other CA and accepts clients of both.
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(other.Certs.OS)
	if err != nil {
		t.Fatal(err)
	}

	serving, err := x509.NewKeyPair(ca, x509.IPAddresses([]net.IP{net.ParseIP("127.0.0.1")}), x509.NotAfter(time.Now().Add(time.Hour)),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}))
	if err != nil {
		t.Fatal(err)
	}

	pair, err := tls.X509KeyPair(serving.CrtPEM, serving.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}

	clients := stdx509.NewCertPool()
	clients.AppendCertsFromPEM(b.Certs.OS.Crt)
	clients.AppendCertsFromPEM(other.Certs.OS.Crt)

	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients, MinVersion: tls.VersionTLS13,
	})))
	machine.RegisterMachineServiceServer(srv, versionServer{})

	go func() { _ = srv.Serve(lis) }()

	t.Cleanup(srv.Stop)

	port := lis.Addr().(*net.TCPAddr).Port
	d := &Dialer{Port: port}

	version := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()

		n, err := d.Dial(ctx, "127.0.0.1", b)
		if err != nil {
			return err
		}
		defer n.Close()

		_, err = n.TalosVersion(ctx)

		return err
	}

	if err := version(); err == nil {
		t.Fatal("a node presenting a certificate of a CA nobody accepted was trusted")
	}

	Accept(b.Certs.OS.Crt, []string{string(other.Certs.OS.Crt)})
	t.Cleanup(func() { Accept(b.Certs.OS.Crt, nil) })

	if err := version(); err != nil {
		t.Fatalf("the node presents a certificate of an accepted CA, yet: %v", err)
	}

	Accept(b.Certs.OS.Crt, nil)

	if err := version(); err == nil {
		t.Fatal("the accepted CA is still trusted after Accept with none")
	}
}
