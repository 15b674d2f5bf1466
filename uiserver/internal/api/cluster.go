package api

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/clusterreq"
	"github.com/maeshinshin/ichor/contracts/pkg/cni"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/recovery"
	"github.com/maeshinshin/ichor/contracts/pkg/version"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// ClusterService implements the UI API's ClusterService: the served
// cluster, its discovery targets and the signed-in user.
type ClusterService struct {
	ichorv1.UnimplementedClusterServiceServer
	Deps
}

// GetCluster implements ClusterService.
func (s *ClusterService) GetCluster(ctx context.Context, _ *ichorv1.GetClusterRequest) (*ichorv1.GetClusterResponse, error) {
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
func (s *ClusterService) clusterProto(ctx context.Context, c *ichorv1alpha1.TalosCluster) (*ichorv1.Cluster, error) {
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
			NextScanTime: ts(c.Status.Discovery.NextScanTime), ScanPending: c.PendingScanRequest() != "",
		},
		Paused:    c.Spec.Paused,
		AutoPatch: c.Spec.AutoPatch.Enabled,
		Cni:       cni.Describe(c),
	}
	if c.Spec.Paused {
		out.PausedReason = c.Annotations[ichorv1alpha1.PausedReasonAnnotation]
		if p := apimeta.FindStatusCondition(c.Status.Conditions, ichorv1alpha1.PausedCondition); p != nil && p.Status == metav1.ConditionTrue {
			out.PausedSince = ts(&p.LastTransitionTime)
		}
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
	s.addInstallation(ctx, out)
	if s.Clients.Authorize(ctx, "list", resMachines) == nil {
		machines, err := s.clusterMachines(ctx)
		if err != nil {
			return nil, apiError(ctx, err, "listing TalosMachines")
		}
		for _, m := range machines {
			if h, ok := recovery.HoldOf(m); ok {
				out.RecoveryHolds = append(out.RecoveryHolds, &ichorv1.RecoveryHold{
					Machine: h.Name, Role: h.Role, Address: h.Address, DriftPaths: int32(len(h.Drift)), Reason: h.Reason, //nolint:gosec // a CRD-capped list
				})
			}
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
func (s *ClusterService) AddDiscovery(ctx context.Context, req *ichorv1.AddDiscoveryRequest) (*ichorv1.AddDiscoveryResponse, error) {
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

// clusterWrite runs one of the shared cluster writes (package clusterreq) as
// the signed-in user, after checking that they may update the cluster, and
// returns the cluster as written.
func (s *ClusterService) clusterWrite(ctx context.Context, what string,
	do func(context.Context, client.Client, client.ObjectKey) (clusterreq.Result, error),
) (*ichorv1.Cluster, error) {
	what += " TalosCluster " + s.ClusterName
	if err := s.Clients.Authorize(ctx, "update", resClusters); err != nil {
		return nil, apiError(ctx, err, what)
	}
	res, err := do(ctx, s.Clients.User, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName})
	var rf *clusterreq.Refused
	if errors.As(err, &rf) {
		return nil, refused(codes.FailedPrecondition, what, rf.Refusals)
	}
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	return s.clusterProto(ctx, res.Cluster)
}

// ScanDiscovery implements ClusterService: it writes the scan request as the signed-in user.
func (s *ClusterService) ScanDiscovery(ctx context.Context, _ *ichorv1.ScanDiscoveryRequest) (*ichorv1.ScanDiscoveryResponse, error) {
	out, err := s.clusterWrite(ctx, "asking for a scan of", func(ctx context.Context, c client.Client, key client.ObjectKey) (clusterreq.Result, error) {
		return clusterreq.RequestScan(ctx, c, key, time.Now())
	})
	if err != nil {
		return nil, err
	}
	return &ichorv1.ScanDiscoveryResponse{Cluster: out}, nil
}

// PauseCluster implements ClusterService: it pauses the cluster as the signed-in user.
func (s *ClusterService) PauseCluster(ctx context.Context, req *ichorv1.PauseClusterRequest) (*ichorv1.PauseClusterResponse, error) {
	out, err := s.clusterWrite(ctx, "pausing", func(ctx context.Context, c client.Client, key client.ObjectKey) (clusterreq.Result, error) {
		return clusterreq.Pause(ctx, c, key, req.GetReason())
	})
	if err != nil {
		return nil, err
	}
	return &ichorv1.PauseClusterResponse{Cluster: out}, nil
}

// ResumeCluster implements ClusterService: it resumes the cluster as the signed-in user.
func (s *ClusterService) ResumeCluster(ctx context.Context, _ *ichorv1.ResumeClusterRequest) (*ichorv1.ResumeClusterResponse, error) {
	out, err := s.clusterWrite(ctx, "resuming", clusterreq.Resume)
	if err != nil {
		return nil, err
	}
	return &ichorv1.ResumeClusterResponse{Cluster: out}, nil
}

// ConfirmRecovery implements ClusterService: it lifts a full-loss
// recovery's holds as the signed-in user, the cluster's name typed.
func (s *ClusterService) ConfirmRecovery(ctx context.Context, req *ichorv1.ConfirmRecoveryRequest) (*ichorv1.ConfirmRecoveryResponse, error) {
	if req.GetConfirmClusterName() != s.ClusterName {
		return nil, invalid("type the cluster's name %q to confirm that its machines may be applied to", s.ClusterName)
	}
	what := "lifting the recovery's holds on the TalosMachines of " + s.ClusterName
	if err := s.Clients.Authorize(ctx, "patch", resMachines); err != nil {
		return nil, apiError(ctx, err, what)
	}
	held, err := recovery.Holds(ctx, s.Clients.User, s.Clients.Namespace, s.ClusterName)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	if len(held) == 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "no TalosMachine of cluster %s is held by a recovery (%s=%s): nothing to confirm",
			s.ClusterName, ichorv1alpha1.HoldApplyAnnotation, recovery.HoldValue)
	}
	names := make([]string, 0, len(held))
	for _, h := range held {
		names = append(names, h.Name)
	}
	if err := recovery.ReleaseHolds(ctx, s.Clients.User, s.Clients.Namespace, names); err != nil {
		return nil, apiError(ctx, err, what)
	}
	c := &ichorv1alpha1.TalosCluster{}
	if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
		return nil, apiError(ctx, err, "reading TalosCluster "+s.ClusterName)
	}
	out, err := s.clusterProto(ctx, c)
	if err != nil {
		return nil, err
	}
	return &ichorv1.ConfirmRecoveryResponse{Released: names, Cluster: out}, nil
}

// WhoAmI implements ClusterService.
func (s *ClusterService) WhoAmI(ctx context.Context, _ *ichorv1.WhoAmIRequest) (*ichorv1.WhoAmIResponse, error) {
	id, ok := identity.From(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "sign in first")
	}
	return &ichorv1.WhoAmIResponse{Username: id.Username, Groups: id.Groups}, nil
}

// addInstallation adds what the IchorInstallation records (the installed
// Ichor and who manages it), from the cache, when the user may get it; the
// summary goes without them when there is none or the user may not.
func (s *ClusterService) addInstallation(ctx context.Context, out *ichorv1.Cluster) {
	if s.Clients.Authorize(ctx, "get", guard.ResourceIchorInstallations) != nil {
		return
	}
	ii := &ichorv1alpha1.IchorInstallation{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii); err != nil {
		return
	}
	out.IchorInstalledVersion, out.IchorManager = ii.Status.InstalledVersion, ichorManager(ii)
}
