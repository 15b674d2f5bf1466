package talos

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// The calls of Talos's etcd recovery procedure (Talos "Disaster Recovery":
// wipe EPHEMERAL on every control plane so its etcd waits in Preparing,
// upload the snapshot with EtcdRecover, Bootstrap with recover_etcd on one;
// the others join it).

// EtcdServicePreparing is the etcd service's state while it waits for a
// Bootstrap or for a member to join (Talos's service runner state
// "Preparing": the service's pre-step, which for etcd with an empty data
// directory waits to join a cluster,
// t:internal/app/machined/pkg/system/services/etcd.go argsForControlPlane).
const EtcdServicePreparing = "Preparing"

// EtcdService is the etcd service as the node's machined reports it.
type EtcdService struct {
	// State is the service's state: Preparing, Running, Finished, ...
	State string
	// Healthy is the service's last health check; false when unknown.
	Healthy bool
}

// EtcdService reads the etcd service's state from ServiceList (a worker has none: an error).
func (n *Node) EtcdService(ctx context.Context) (EtcdService, error) {
	resp, err := n.c.ServiceList(ctx)
	if err != nil {
		return EtcdService{}, fmt.Errorf("list the services: %w", err)
	}

	for _, msg := range resp.GetMessages() {
		for _, s := range msg.GetServices() {
			if s.GetId() == "etcd" {
				return EtcdService{State: s.GetState(), Healthy: s.GetHealth().GetHealthy()}, nil
			}
		}
	}

	return EtcdService{}, errors.New("the node runs no etcd service")
}

// EtcdRecover uploads an etcd snapshot for a recovering Bootstrap (Talos
// writes it to /var/lib/etcd.snapshot, replacing an earlier upload,
// t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go EtcdRecover).
func (v *Verified) EtcdRecover(ctx context.Context, snapshot io.Reader) error {
	if _, err := v.c.EtcdRecover(ctx, snapshot); err != nil {
		return fmt.Errorf("upload the etcd snapshot: %w", err)
	}

	return nil
}

// BootstrapRecover bootstraps etcd on this control plane from the uploaded
// snapshot: Talos restores it into a new single-member cluster
// (etcdutl's snapshot restore, with its hash check) and starts etcd; the
// other control planes join it. Talos refuses it with AlreadyExists when the
// etcd data directory is not empty.
func (v *Verified) BootstrapRecover(ctx context.Context) error {
	if err := v.c.Bootstrap(ctx, &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		return fmt.Errorf("bootstrap etcd from the snapshot: %w", err)
	}

	return nil
}
