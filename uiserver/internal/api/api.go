// Package api implements the UI API (contracts/proto/ichor/v1): reads from the
// backend's cache after an access review made as the signed-in user, writes
// as the signed-in user through impersonation, after the dangerous-operation
// checks of contracts/pkg/guard.
package api

import (
	"context"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
)

// Resources the API reads.
const (
	resMachines = "talosmachines"
	resClusters = "talosclusters"
	resPatches  = "talosconfigpatches"
)

// Server implements the UI API's services.
type Server struct {
	ichorv1.UnimplementedClusterServiceServer
	ichorv1.UnimplementedMachineServiceServer
	ichorv1.UnimplementedOperationServiceServer
	ichorv1.UnimplementedSettingsServiceServer
	ichorv1.UnimplementedReclaimServiceServer

	// Clients reach the API server.
	Clients *kube.Clients
	// ClusterName is the TalosCluster ichor-ui serves.
	ClusterName string
	// Credentials is ichor-ui's own identity, which writes and deletes the
	// foreign talosconfig Secrets of reclaims (no user role grants Secrets);
	// nil makes StartReclaim answer UNIMPLEMENTED.
	Credentials client.Client
	// SettingsReadOnly makes UpdateSettings refuse (--settings-read-only).
	SettingsReadOnly bool
	// Stopping is closed when the server begins to shut down: streams end
	// with UNAVAILABLE so that clients reconnect (to another replica) and resume.
	Stopping <-chan struct{}

	converted sync.Map // namespace/name -> convertedMachine
	bundles   syntheticBundles

	handlerMu    sync.Mutex
	handlerAdded atomic.Bool
	gen          atomic.Uint64 // changes of the cached machines seen
	snap         atomic.Pointer[snapshot]
}

// watchGenerations registers, once, the event handler that counts the
// changes of the cached TalosMachines.
func (s *Server) watchGenerations(ctx context.Context) error {
	if s.handlerAdded.Load() {
		return nil
	}
	s.handlerMu.Lock()
	defer s.handlerMu.Unlock()
	if s.handlerAdded.Load() {
		return nil
	}
	inf, err := s.Clients.Cache.GetInformer(ctx, &ichorv1alpha1.TalosMachine{})
	if err != nil {
		return err
	}
	bump := func() { s.gen.Add(1) }
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { bump() },
		UpdateFunc: func(any, any) { bump() },
		DeleteFunc: func(any) { bump() },
	}); err != nil {
		return err
	}
	// Changes before the handler was added are in the next snapshot.
	bump()
	s.handlerAdded.Store(true)
	return nil
}

type convertedMachine struct {
	rv  string
	msg *ichorv1.Machine
}

// machineProto converts m once per resourceVersion; the messages are shared
// read-only between responses.
func (s *Server) machineProto(m *ichorv1alpha1.TalosMachine) *ichorv1.Machine {
	key := m.Namespace + "/" + m.Name
	if v, ok := s.converted.Load(key); ok {
		if c := v.(convertedMachine); c.rv == m.ResourceVersion && c.rv != "" {
			return c.msg
		}
	}
	msg := machineToProto(m)
	s.converted.Store(key, convertedMachine{rv: m.ResourceVersion, msg: msg})
	return msg
}

// GetCluster implements ClusterService.
func (s *Server) GetCluster(ctx context.Context, _ *ichorv1.GetClusterRequest) (*ichorv1.GetClusterResponse, error) {
	if err := s.Clients.Authorize(ctx, "get", resClusters); err != nil {
		return nil, apiError(ctx, err, "reading the cluster")
	}
	c := &ichorv1alpha1.TalosCluster{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
		return nil, apiError(ctx, err, "reading TalosCluster "+s.ClusterName)
	}
	out, err := s.clusterProto(ctx, c)
	if err != nil {
		return nil, err
	}
	return &ichorv1.GetClusterResponse{Cluster: out}, nil
}

// clusterProto converts c, with the machine counts when the user may list machines.
func (s *Server) clusterProto(ctx context.Context, c *ichorv1alpha1.TalosCluster) (*ichorv1.Cluster, error) {
	port := c.Spec.Endpoint.Port
	if port == 0 {
		port = 6443
	}
	out := &ichorv1.Cluster{
		Name: c.Name, Namespace: c.Namespace,
		TalosVersion: c.Spec.TalosVersion, KubernetesVersion: c.Spec.KubernetesVersion,
		VersionContract: c.Spec.VersionContract, ControlPlaneCount: c.Spec.ControlPlane.Count,
		Ready: "Unknown", Conditions: conditions(c.Status.Conditions), ResourceVersion: c.ResourceVersion,
		IchorVersion: version.Get().Version,
		Endpoint:     "https://" + net.JoinHostPort(c.Spec.Endpoint.Host, strconv.Itoa(int(port))),
		Discovery: &ichorv1.Discovery{
			Addresses:    append([]string(nil), c.Spec.Discovery.Addresses...),
			Subnets:      append([]string(nil), c.Spec.Discovery.Subnets...),
			LastScanTime: ts(c.Status.Discovery.LastScanTime), Message: c.Status.Discovery.Message,
		},
	}
	for _, r := range c.Status.Discovery.Addresses {
		out.Discovery.Results = append(out.Discovery.Results, &ichorv1.DiscoveryResult{
			Address: r.Address, Result: r.Result, Machine: r.Machine, Message: r.Message, ProbedAt: ts(&r.ProbedAt),
		})
	}
	for _, cond := range c.Status.Conditions {
		if cond.Type == ichorv1alpha1.ReadyCondition {
			out.Ready, out.ReadyMessage = string(cond.Status), cond.Message
		}
	}
	if s.Clients.Authorize(ctx, "list", resMachines) == nil {
		machines, err := s.clusterMachines(ctx)
		if err != nil {
			return nil, apiError(ctx, err, "listing TalosMachines")
		}
		for _, m := range machines {
			switch m.Spec.Approval.State {
			case ichorv1alpha1.ApprovalPending:
				out.MachinesPending++
			case ichorv1alpha1.ApprovalApproved:
				out.MachinesApproved++
			}
		}
	}
	return out, nil
}

// AddDiscovery implements ClusterService: it adds the addresses and subnets
// to the TalosCluster's spec.discovery as the signed-in user.
func (s *Server) AddDiscovery(ctx context.Context, req *ichorv1.AddDiscoveryRequest) (*ichorv1.AddDiscoveryResponse, error) {
	if len(req.GetAddresses())+len(req.GetSubnets()) == 0 {
		return nil, invalid("give at least one address (192.168.10.5) or subnet (192.168.10.0/24) to discover")
	}
	var addrs, subnets []string
	for i, a := range req.GetAddresses() {
		addr, _, err := ichorv1alpha1.ParseDiscoveryTarget(a)
		if err != nil || addr == "" {
			return nil, invalid("addresses[%d] %q is not an IP address such as 192.168.10.5 (subnets go in subnets)", i, a)
		}
		addrs = append(addrs, addr)
	}
	for i, n := range req.GetSubnets() {
		_, subnet, err := ichorv1alpha1.ParseDiscoveryTarget(n)
		if err != nil {
			return nil, invalid("subnets[%d]: %s", i, err.Error())
		}
		if subnet == "" {
			return nil, invalid("subnets[%d] %q is an address, not a subnet: put it in addresses, or write a CIDR such as 192.168.10.0/24", i, n)
		}
		subnets = append(subnets, subnet)
	}
	what := "adding discovery targets to TalosCluster " + s.ClusterName
	c := &ichorv1alpha1.TalosCluster{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
			return err
		}
		if len(c.Spec.Discovery.Add(addrs, subnets)) == 0 {
			return nil
		}
		return s.Clients.User.Update(ctx, c)
	})
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	out, err := s.clusterProto(ctx, c)
	if err != nil {
		return nil, err
	}
	return &ichorv1.AddDiscoveryResponse{Cluster: out}, nil
}

// WhoAmI implements ClusterService.
func (s *Server) WhoAmI(ctx context.Context, _ *ichorv1.WhoAmIRequest) (*ichorv1.WhoAmIResponse, error) {
	id, ok := identity.From(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "sign in first")
	}
	return &ichorv1.WhoAmIResponse{Username: id.Username, Groups: id.Groups}, nil
}

// clusterMachines returns the cached machines of the cluster (shared, read-only).
func (s *Server) clusterMachines(ctx context.Context) ([]*ichorv1alpha1.TalosMachine, error) {
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
