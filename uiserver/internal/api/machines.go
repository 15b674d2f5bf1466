package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/approval"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/removal"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// MachineService implements the UI API's MachineService: the machines,
// their approval, removal and effective configuration. It also serves the
// shared list of machines from encodings made once per change of the cache
// (CachedWire, CachedJSON: server.Encodings).
type MachineService struct {
	ichorv1.UnimplementedMachineServiceServer
	Deps
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
func (s *MachineService) watchGenerations(ctx context.Context) error {
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
func (s *MachineService) machineProto(m *ichorv1alpha1.TalosMachine) *ichorv1.Machine {
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

// ListMachines implements MachineService.
func (s *MachineService) ListMachines(ctx context.Context, req *ichorv1.ListMachinesRequest) (*ichorv1.ListMachinesResponse, error) {
	switch req.GetApprovalState() {
	case "", ichorv1alpha1.ApprovalPending, ichorv1alpha1.ApprovalApproved, ichorv1alpha1.ApprovalRejected:
	default:
		return nil, invalid("approval_state %q: use pending, approved, rejected or leave it empty", req.GetApprovalState())
	}
	if err := s.Clients.Authorize(ctx, "list", resMachines); err != nil {
		return nil, apiError(ctx, err, "listing machines")
	}
	snap, err := s.machineSnapshot(ctx)
	if err != nil {
		return nil, apiError(ctx, err, "listing machines")
	}
	st := req.GetApprovalState()
	if st == "" {
		return snap.all, nil
	}
	out := &ichorv1.ListMachinesResponse{ResumeToken: snap.all.GetResumeToken()}
	for _, m := range snap.all.GetMachines() {
		if m.GetApproval().GetState() == st {
			out.Machines = append(out.Machines, m)
		}
	}
	return out, nil
}

// snapshot is the converted list of the cluster's machines at one generation
// of the cache; it is shared read-only between responses, and so are its
// encodings, made once on first use (see Encoded).
type snapshot struct {
	gen uint64
	all *ichorv1.ListMachinesResponse

	wireOnce sync.Once
	wire     []byte
	wireErr  error
	jsonOnce sync.Once
	json     []byte
	gzip     []byte
	jsonErr  error
}

// CachedWire returns the protobuf encoding of v when v is the shared list
// of machines ListMachines returned, made once per change of the machines;
// ok is false for any other message. ichor-ui's gRPC codec asks it first,
// so that 50 clients listing 1,000 machines cost one encoding, not 50.
func (s *MachineService) CachedWire(v any) (b []byte, ok bool, err error) {
	snap := s.snap.Load()
	if snap == nil || v != snap.all {
		return nil, false, nil
	}
	snap.wireOnce.Do(func() { snap.wire, snap.wireErr = proto.Marshal(snap.all) })
	return snap.wire, true, snap.wireErr
}

// CachedJSON is CachedWire for the REST encoding; marshal is the gateway's
// marshaler, so that the bytes are those grpc-gateway would write. gz is the
// same JSON gzip-compressed, for clients that accept it.
func (s *MachineService) CachedJSON(v any, marshal func(any) ([]byte, error)) (b, gz []byte, ok bool, err error) {
	snap := s.snap.Load()
	if snap == nil || v != snap.all {
		return nil, nil, false, nil
	}
	snap.jsonOnce.Do(func() {
		snap.json, snap.jsonErr = marshal(snap.all)
		if snap.jsonErr == nil {
			snap.gzip, snap.jsonErr = gzipped(snap.json)
		}
	})
	return snap.json, snap.gzip, true, snap.jsonErr
}

func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// machineSnapshot returns the converted list, rebuilt only when the cache
// has changed since (an event handler counts the changes).
func (s *MachineService) machineSnapshot(ctx context.Context) (*snapshot, error) {
	if err := s.watchGenerations(ctx); err != nil {
		return nil, err
	}
	gen := s.gen.Load()
	if cur := s.snap.Load(); cur != nil && cur.gen == gen {
		return cur, nil
	}
	token := s.Clients.LastSyncResourceVersion(ctx, &ichorv1alpha1.TalosMachine{})
	machines, err := s.clusterMachines(ctx)
	if err != nil {
		return nil, err
	}
	all := &ichorv1.ListMachinesResponse{Machines: make([]*ichorv1.Machine, 0, len(machines)), ResumeToken: token}
	for _, m := range machines {
		all.Machines = append(all.Machines, s.machineProto(m))
	}
	snap := &snapshot{gen: gen, all: all}
	s.snap.Store(snap)
	return snap, nil
}

// GetMachine implements MachineService.
func (s *MachineService) GetMachine(ctx context.Context, req *ichorv1.GetMachineRequest) (*ichorv1.GetMachineResponse, error) {
	if req.GetName() == "" {
		return nil, invalid("name is required")
	}
	if err := s.Clients.Authorize(ctx, "get", resMachines); err != nil {
		return nil, apiError(ctx, err, "reading machine "+req.GetName())
	}
	m, err := s.cachedMachine(ctx, req.GetName())
	if err != nil {
		return nil, apiError(ctx, err, "reading machine "+req.GetName())
	}
	return &ichorv1.GetMachineResponse{Machine: s.machineProto(m)}, nil
}

func (s *MachineService) cachedMachine(ctx context.Context, name string) (*ichorv1alpha1.TalosMachine, error) {
	m := &ichorv1alpha1.TalosMachine{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, m); err != nil {
		return nil, err
	}
	if m.Spec.ClusterName != s.ClusterName {
		return nil, status.Errorf(codes.NotFound, "machine %s belongs to cluster %q, not %q", name, m.Spec.ClusterName, s.ClusterName)
	}
	return m, nil
}

// WatchMachines implements MachineService. The watch is made as the signed-in
// user, so the API server authorizes it and resume tokens are its resourceVersions.
func (s *MachineService) WatchMachines(req *ichorv1.WatchMachinesRequest, stream ichorv1.MachineService_WatchMachinesServer) error {
	ctx := stream.Context()
	rv := req.GetResumeToken()
	if rv == "" {
		list := &ichorv1alpha1.TalosMachineList{}
		if err := s.Clients.User.List(ctx, list, client.InNamespace(s.Clients.Namespace)); err != nil {
			return apiError(ctx, err, "listing machines")
		}
		for i := range list.Items {
			if list.Items[i].Spec.ClusterName != s.ClusterName {
				continue
			}
			if err := stream.Send(&ichorv1.WatchMachinesResponse{
				Type: ichorv1.WatchMachinesResponse_EVENT_TYPE_ADDED, Machine: machineToProto(&list.Items[i]), ResumeToken: list.ResourceVersion,
			}); err != nil {
				return err
			}
		}
		rv = list.ResourceVersion
		if err := stream.Send(&ichorv1.WatchMachinesResponse{Type: ichorv1.WatchMachinesResponse_EVENT_TYPE_SYNCED, ResumeToken: rv}); err != nil {
			return err
		}
	}
	for {
		next, err := s.watchOnce(ctx, stream, rv)
		if err != nil {
			return err
		}
		rv = next
	}
}

// watchOnce follows one API server watch until it ends; it returns the
// resourceVersion to continue from.
func (s *MachineService) watchOnce(ctx context.Context, stream ichorv1.MachineService_WatchMachinesServer, rv string) (string, error) {
	w, err := s.Clients.User.Watch(ctx, &ichorv1alpha1.TalosMachineList{}, client.InNamespace(s.Clients.Namespace),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
	if err != nil {
		return rv, apiError(ctx, err, "watching machines")
	}
	defer w.Stop()
	for {
		select {
		case <-s.Stopping:
			return rv, status.Error(codes.Unavailable, "ichor-ui is shutting down; reconnect and resume with the last resume_token")
		case <-ctx.Done():
			return rv, status.FromContextError(ctx.Err()).Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, nil
			}
			var typ ichorv1.WatchMachinesResponse_EventType
			switch ev.Type {
			case watch.Added:
				typ = ichorv1.WatchMachinesResponse_EVENT_TYPE_ADDED
			case watch.Modified:
				typ = ichorv1.WatchMachinesResponse_EVENT_TYPE_MODIFIED
			case watch.Deleted:
				typ = ichorv1.WatchMachinesResponse_EVENT_TYPE_DELETED
			case watch.Bookmark:
				if m, ok := ev.Object.(*ichorv1alpha1.TalosMachine); ok {
					rv = m.ResourceVersion
				}
				continue
			case watch.Error:
				return rv, apiError(ctx, apierrors.FromObject(ev.Object), "watching machines")
			default:
				continue
			}
			m, ok := ev.Object.(*ichorv1alpha1.TalosMachine)
			if !ok {
				continue
			}
			rv = m.ResourceVersion
			if m.Spec.ClusterName != s.ClusterName {
				continue
			}
			if err := stream.Send(&ichorv1.WatchMachinesResponse{Type: typ, Machine: machineToProto(m), ResumeToken: rv}); err != nil {
				return rv, err
			}
		}
	}
}

// machineFacts gathers what the guard's machine checks need, with the
// loader the webhook uses (read from the backend's cache).
func (s *MachineService) machineFacts(ctx context.Context, m *ichorv1alpha1.TalosMachine) (guard.MachineFacts, error) {
	return guard.LoadMachineFacts(ctx, s.Clients.Cache, m)
}

// userMachine reads a machine fresh, as the signed-in user.
func (s *MachineService) userMachine(ctx context.Context, name string) (*ichorv1alpha1.TalosMachine, error) {
	m := &ichorv1alpha1.TalosMachine{}
	if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, m); err != nil {
		return nil, err
	}
	if m.Spec.ClusterName != s.ClusterName {
		return nil, status.Errorf(codes.NotFound, "machine %s belongs to cluster %q, not %q", name, m.Spec.ClusterName, s.ClusterName)
	}
	return m, nil
}

// decide writes an approval decision as the signed-in user, after the guard's
// checks; a conflict is retried on a fresh read.
func (s *MachineService) decide(ctx context.Context, name, state string, mutate func(m *ichorv1alpha1.TalosMachine) error) (*ichorv1alpha1.TalosMachine, error) {
	id, ok := identity.From(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "sign in first")
	}
	what := "approving machine " + name
	if state == ichorv1alpha1.ApprovalRejected {
		what = "rejecting machine " + name
	}
	m, err := approval.Decide(ctx, s.Clients.User, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, state, id.Username, time.Now(), s.machineFacts, mutate)
	var rf *approval.Refused
	switch {
	case errors.As(err, &rf):
		return nil, refused(codes.FailedPrecondition, what, rf.Refusals)
	case errors.Is(err, approval.ErrBeingRemoved):
		return nil, status.Errorf(codes.FailedPrecondition, "%s: the machine is being removed; wait until it reappears as pending", what)
	case err != nil:
		return nil, apiError(ctx, err, what)
	}
	return m, nil
}

// ApproveMachine implements MachineService.
func (s *MachineService) ApproveMachine(ctx context.Context, req *ichorv1.ApproveMachineRequest) (*ichorv1.ApproveMachineResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalid("name is required")
	}
	role := req.GetRole()
	if role != ichorv1alpha1.RoleControlPlane && role != ichorv1alpha1.RoleWorker {
		return nil, invalid("role is required: controlplane or worker (got %q)", role)
	}
	m, err := s.decide(ctx, name, ichorv1alpha1.ApprovalApproved, func(m *ichorv1alpha1.TalosMachine) error {
		if m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved {
			return status.Errorf(codes.FailedPrecondition, "machine %s is already approved (by %s); to change its role, remove it and approve it again",
				name, orUnknown(m.Spec.Approval.DecidedBy))
		}
		disks := m.Status.Hardware.Disks
		roles, err := diskRolesFromProto(req.GetDisks(), disks)
		if err != nil {
			return err
		}
		install, _, err := approval.ChooseInstallDisk(diskSelectorFromProto(req.GetInstallDisk()), disks, roles, approveFields)
		if err != nil {
			return invalid("%s", err.Error())
		}
		if err := approval.CheckWipes(install, req.GetConfirmWipe(), roles, disks, approveFields); err != nil {
			return invalid("%s", err.Error())
		}
		var network ichorv1alpha1.MachineNetwork
		if n := req.GetNetwork(); n != nil {
			network, err = approval.Network(approval.NetworkInput{NIC: n.GetMacAddress(), DHCP: n.GetDhcp(), Addresses: n.GetAddresses(),
				Gateway: n.GetGateway(), Nameservers: n.GetNameservers(), VLAN: int(n.GetVlan())}, m.Status.Hardware.Links, networkFields)
			if err != nil {
				return invalid("%s", err.Error())
			}
		}
		m.Spec.Disks = roles
		m.Spec.Network = network
		m.Spec.Role = role
		if h := req.GetHostname(); h != "" {
			m.Spec.Hostname = h
		}
		if len(req.GetLabels()) > 0 {
			m.Spec.Labels = req.GetLabels()
		}
		m.Spec.Install.Disk = install
		m.Spec.Install.ConfirmWipe = req.GetConfirmWipe()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &ichorv1.ApproveMachineResponse{Machine: machineToProto(m)}, nil
}

// RejectMachine implements MachineService.
func (s *MachineService) RejectMachine(ctx context.Context, req *ichorv1.RejectMachineRequest) (*ichorv1.RejectMachineResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalid("name is required")
	}
	m, err := s.decide(ctx, name, ichorv1alpha1.ApprovalRejected, func(m *ichorv1alpha1.TalosMachine) error {
		switch m.Spec.Approval.State {
		case ichorv1alpha1.ApprovalRejected:
			return status.Errorf(codes.FailedPrecondition, "machine %s is already rejected (by %s)", name, orUnknown(m.Spec.Approval.DecidedBy))
		case ichorv1alpha1.ApprovalApproved:
			return status.Errorf(codes.FailedPrecondition, "machine %s is approved; to take it out of the cluster, remove it", name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &ichorv1.RejectMachineResponse{Machine: machineToProto(m)}, nil
}

// RemoveMachine implements MachineService: the guard's deletion checks, then
// one update that records the consent and options, then the delete, both as
// the signed-in user; a refused delete takes the consent back.
func (s *MachineService) RemoveMachine(ctx context.Context, req *ichorv1.RemoveMachineRequest) (*ichorv1.RemoveMachineResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalid("name is required")
	}
	what := "removing machine " + name
	m, err := s.userMachine(ctx, name)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	if m.DeletionTimestamp != nil {
		return &ichorv1.RemoveMachineResponse{Machine: machineToProto(m)}, nil
	}
	facts, err := s.machineFacts(ctx, m)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	if refusals := removal.Refusals(m, facts); len(refusals) > 0 {
		return nil, refused(codes.FailedPrecondition, what, refusals)
	}
	res, err := removal.Remove(ctx, s.Clients.User, m, removal.Options{Reboot: req.GetReboot(), Force: req.GetForce()})
	switch {
	case errors.Is(err, removal.ErrReplaced):
		return nil, status.Errorf(codes.Aborted, "machine %s was replaced meanwhile; reload and try again", name)
	case err != nil && res.UndoErr != nil:
		return nil, apiError(ctx, fmt.Errorf("%w (and taking the %s annotation back failed: %w; remove it by hand)",
			err, ichorv1alpha1.AllowDeleteAnnotation, res.UndoErr), what)
	case err != nil:
		return nil, apiError(ctx, err, what)
	}
	marked := res.Marked
	return &ichorv1.RemoveMachineResponse{Machine: machineToProto(marked)}, nil
}

// PreviewRemoval implements MachineService: what RemoveMachine would do with
// the same options, and the refusals of the same guard call, from the shared
// removal plan. It reads the machine as the signed-in user, so `get` on the
// machine is all it needs (a viewer sees why a removal would be refused), and
// it writes nothing.
func (s *MachineService) PreviewRemoval(ctx context.Context, req *ichorv1.PreviewRemovalRequest) (*ichorv1.PreviewRemovalResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalid("name is required")
	}
	what := "previewing the removal of machine " + name
	m, err := s.userMachine(ctx, name)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	facts, err := s.machineFacts(ctx, m)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	p := removal.Plan(m, facts, removal.Options{Reboot: req.GetReboot(), Force: req.GetForce()})
	out := &ichorv1.PreviewRemovalResponse{Allowed: p.Allowed, Steps: p.Steps, Effects: p.Effects}
	for _, r := range p.Refusals {
		out.Refusals = append(out.Refusals, &ichorv1.Refusal{Field: r.Field, Rule: r.Rule, WayOut: r.WayOut, Overridable: r.Overridable})
	}
	return out, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// chooseInstallDisk returns the system disk: the one given (which must be a
// discovered disk when discovery read any), or else the only discovered disk.
// approveFields and networkFields name ApproveMachineRequest's fields in the
// shared approval messages.
var (
	approveFields = approval.Fields{
		InstallDisk:     "set install_disk",
		ConfirmWipe:     "confirm_wipe",
		DiskRole:        func(dr ichorv1alpha1.DiskRole) string { return "disk role " + dr.Role + " on " + dr.Disk.String() },
		RoleConfirmWipe: "set its confirm_wipe",
	}
	networkFields = approval.NetworkFields{
		NIC: "network.mac_address", DHCP: "network.dhcp", Address: "network.addresses", Gateway: "network.gateway",
		Nameserver: "network.nameservers", VLAN: "network.vlan",
	}
)

// diskRolesFromProto checks the requested disk roles against the discovered disks.
func diskRolesFromProto(in []*ichorv1.DiskRole, disks []ichorv1alpha1.DiscoveredDisk) ([]ichorv1alpha1.DiskRole, error) {
	var out []ichorv1alpha1.DiskRole
	for i, d := range in {
		sel := diskSelectorFromProto(d.GetDisk())
		if sel == nil {
			return nil, invalid("disks[%d].disk is required: name the disk by wwid, serial, by_id, bus_path or device_path", i)
		}
		dr := ichorv1alpha1.DiskRole{Disk: *sel, Role: d.GetRole(), VolumeName: d.GetVolumeName(), MaxSize: d.GetMaxSize(), ConfirmWipe: d.GetConfirmWipe()}
		if err := approval.CheckRole(dr, fmt.Sprintf("disks[%d]", i), "set volume_name", "set it with install_disk"); err != nil {
			return nil, invalid("%s", err.Error())
		}
		if _, err := approval.Find(*sel, disks); err != nil {
			return nil, invalid("disks[%d]: %s", i, err.Error())
		}
		out = append(out, dr)
	}
	return out, nil
}
