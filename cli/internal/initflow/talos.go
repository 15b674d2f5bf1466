package initflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// ErrConfiguredElsewhere is wrapped when the node runs a Talos configured with
// another cluster's CA: init never touches it.
var ErrConfiguredElsewhere = errors.New("the node runs a configured Talos that does not trust this cluster's secrets bundle")

// Node is what init reads from the first node: its inventory (contracts/pkg/talos
// ReadInventory, the reader discovery uses too) and the maintenance
// certificate it presented.
type Node struct {
	Address     string
	Fingerprint string
	talos.Inventory
}

// adminCertTTL is the lifetime of the os:admin certificate init uses for its
// own calls; the talosconfig it stores has machinery's default (one year).
const adminCertTTL = 30 * time.Minute

// bootstrap creates the etcd cluster on the node. AlreadyExists (its data
// directory holds a member) means an earlier run did it: not an error
// (siderolabs/talos internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go Bootstrap).
func bootstrap(ctx context.Context, c *talosclient.Client) (already bool, err error) {
	err = c.Bootstrap(ctx, &machineapi.BootstrapRequest{})
	if status.Code(err) == codes.AlreadyExists {
		return true, nil
	}

	return false, err
}

// talosconfig is the os:admin talosconfig of the cluster, for the store: the
// recovery path that needs no controller.
func talosconfig(cluster, address string, b *secrets.Bundle) ([]byte, error) {
	pem, err := b.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	if err != nil {
		return nil, fmt.Errorf("issue the os:admin client certificate: %w", err)
	}

	cfg := clientconfig.NewConfig(cluster, []string{address}, b.Certs.OS.Crt, pem)
	if ctx, ok := cfg.Contexts[cluster]; ok {
		ctx.Nodes = []string{address}
	}

	return cfg.Bytes()
}

// Talosconfig is the os:admin talosconfig of cluster for the store, its
// endpoint and node address, its client certificate issued from b.
func Talosconfig(cluster, address string, b *secrets.Bundle) ([]byte, error) {
	return talosconfig(cluster, address, b)
}
