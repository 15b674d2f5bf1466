// Package api implements the UI API (contracts/proto/ichor/v1): reads from the
// backend's cache after an access review made as the signed-in user, writes
// as the signed-in user through impersonation, after the dangerous-operation
// checks of contracts/pkg/guard.
//
// Each gRPC service is a type of its own over the shared Deps:
// ClusterService (cluster.go), MachineService (machines.go, config.go),
// OperationService (operations.go), SettingsService (settings.go) and
// ReclaimService (reclaims.go), PatchService (patches.go), BackupService
// (backups.go); NodeService is package nodes.
package api

import (
	"context"
	"sort"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
)

// Resources the API reads.
const (
	resMachines = "talosmachines"
	resClusters = "talosclusters"
	resPatches  = "talosconfigpatches"
)

// Deps are what the UI API's services share: the clients and the cluster
// they serve. Each service (ClusterService, MachineService, ...) is a type
// of its own that embeds them, registered one by one (server.Options).
type Deps struct {
	// Clients reach the API server.
	Clients *kube.Clients
	// ClusterName is the TalosCluster ichor-ui serves.
	ClusterName string
}

// clusterMachines returns the cached machines of the cluster (shared, read-only).
func (s *Deps) clusterMachines(ctx context.Context) ([]*ichorv1alpha1.TalosMachine, error) {
	list := &ichorv1alpha1.TalosMachineList{}
	if err := s.Clients.Cache.List(ctx, list, client.InNamespace(s.Clients.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := make([]*ichorv1alpha1.TalosMachine, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Spec.ClusterName == s.ClusterName {
			out = append(out, &list.Items[i])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
