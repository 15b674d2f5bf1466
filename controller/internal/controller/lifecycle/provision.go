package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// provision sends the configuration to an approved machine in maintenance
// mode, then follows it to running and joined.
func (r *Reconciler) provision(ctx context.Context, s *scope) (ctrl.Result, error) {
	m := s.machine

	if m.Spec.Address == "" {
		progress(m, ichorv1alpha1.ProvisioningReason, "spec.address is empty: set the address the machine answers on in maintenance mode")

		return ctrl.Result{}, nil
	}

	if res, err, done := r.loadOrStall(ctx, s, m.Status.ConfigSentAt == nil); done {
		return res, err
	}

	if m.Status.ConfigSentAt == nil {
		if _, held := m.Annotations[ichorv1alpha1.HoldApplyAnnotation]; held {
			progress(m, ichorv1alpha1.HeldReason, "the annotation "+ichorv1alpha1.HoldApplyAnnotation+" stops provisioning; remove it to send the configuration")

			return ctrl.Result{}, nil
		}

		return r.sendConfig(ctx, s)
	}

	return r.follow(ctx, s)
}

// loadOrStall loads the cluster and bundle, and the render withRender; a
// state a person must fix is reported on Ready and retried at the monitor
// interval.
func (r *Reconciler) loadOrStall(ctx context.Context, s *scope, withRender bool) (ctrl.Result, error, bool) {
	err := r.load(ctx, s, withRender)
	if err == nil {
		return ctrl.Result{}, nil, false
	}

	if machinestate.IsStalled(err) {
		progress(s.machine, ichorv1alpha1.RenderFailedReason, err.Error())

		return ctrl.Result{RequeueAfter: r.MonitorInterval}, nil, true
	}

	return ctrl.Result{}, err, true
}

// pin is the maintenance fingerprint the node must present: the one a person
// accepted with the trust annotation, else the one recorded at discovery or
// by an earlier probe (empty: the first probe records it and sends nothing).
func pin(m *ichorv1alpha1.TalosMachine) string {
	if t := m.Annotations[ichorv1alpha1.TrustMaintenanceFingerprintAnnotation]; t != "" {
		return t
	}

	return m.Status.MaintenanceFingerprint
}

// maintenance dials the node in maintenance mode with the fingerprint pinned
// and checks its stage, fingerprint and identity. It returns nil (with Ready
// or FingerprintTrusted saying why) when nothing may be sent.
func (r *Reconciler) maintenance(ctx context.Context, s *scope) (*talos.Maintenance, error) {
	m := s.machine
	want := pin(m)

	mn, err := talos.DialMaintenance(ctx, m.Spec.Address, r.MaintenancePort, want)
	if err != nil {
		return nil, err
	}

	stage, err := mn.Stage(ctx)
	if err != nil {
		seen := mn.Fingerprint()
		mn.Close()

		if want != "" && seen != "" && seen != want {
			// A node that took the configuration, though the answer to the
			// send was lost (the connection closes as the node leaves
			// maintenance mode), now presents its cluster certificate: that
			// is not a changed maintenance certificate, and the install is
			// followed (which checks who the node is before any step).
			if r.runsOurConfig(ctx, s) {
				return nil, errRunsOurConfig
			}

			r.fingerprintChanged(m, want, seen)

			return nil, nil
		}

		return nil, err
	}

	if stage != ichorv1alpha1.StageMaintenance {
		mn.Close()
		progress(m, ichorv1alpha1.ProvisioningReason, fmt.Sprintf("the node at %s is in stage %s, not maintenance: nothing was sent", m.Spec.Address, stage))

		return nil, nil
	}

	uuid, err := mn.UUID(ctx)
	if err != nil {
		mn.Close()

		return nil, err
	}

	if m.Spec.Identity.UUID != "" && !strings.EqualFold(uuid, m.Spec.Identity.UUID) {
		mn.Close()
		r.identityMismatch(m, &talos.IdentityMismatchError{
			Where: "the node at " + m.Spec.Address + " (maintenance mode)", Want: talos.Identity{UUID: m.Spec.Identity.UUID},
			Got: talos.Identity{UUID: uuid}, Fields: []string{"SMBIOS UUID"},
		}, "sending the configuration")

		return nil, nil
	}

	if seen := mn.Fingerprint(); m.Status.MaintenanceFingerprint != seen {
		// A fingerprint this probe records is not trusted in the same step: it
		// goes to status first, and the configuration (with the CA keys) is
		// sent at a later step to a node that presents the recorded one. From
		// then on it is the pin of every reconnect of the provisioning.
		mn.Close()

		m.Status.MaintenanceFingerprint = seen
		setCond(m, ichorv1alpha1.FingerprintTrustedCondition, metav1.ConditionTrue, "Recorded",
			"recorded the maintenance certificate "+seen+"; the configuration is sent at the next step to a node that presents it")
		progress(m, ichorv1alpha1.ProvisioningReason, fmt.Sprintf("recorded the maintenance certificate of the node at %s: nothing was sent in this step", m.Spec.Address))

		return nil, nil
	}

	if identityPaused(m) {
		mn.Close()

		msg := fmt.Sprintf("the node at %s is this machine again (SMBIOS UUID %q); the work resumes", m.Spec.Address, uuid)
		setCond(m, ichorv1alpha1.IdentityConflictCondition, metav1.ConditionFalse, ichorv1alpha1.IdentityConfirmedReason, msg)
		r.eventf(m, corev1.EventTypeNormal, ichorv1alpha1.IdentityConfirmedReason, "Provision", "%s", msg)

		return nil, nil
	}

	setCond(m, ichorv1alpha1.FingerprintTrustedCondition, metav1.ConditionTrue, "Pinned", "the node presents the pinned maintenance certificate")

	return mn, nil
}

func (r *Reconciler) fingerprintChanged(m *ichorv1alpha1.TalosMachine, want, seen string) {
	msg := fmt.Sprintf("the node at %s presents maintenance certificate %s, not the pinned %s: nothing was sent. "+
		"If you verified the new certificate on the node's console, an administrator (`update` on `talosmachines/trust`, held by ichor-admin) "+
		"accepts it by annotating the machine %s=%s", m.Spec.Address, seen, want,
		ichorv1alpha1.TrustMaintenanceFingerprintAnnotation, seen)

	was := findCond(m, ichorv1alpha1.FingerprintTrustedCondition)
	setCond(m, ichorv1alpha1.FingerprintTrustedCondition, metav1.ConditionFalse, ichorv1alpha1.FingerprintChangedReason, msg)
	progress(m, ichorv1alpha1.FingerprintChangedReason, msg)

	if was == nil || was.Message != msg {
		warnf(r, m, ichorv1alpha1.FingerprintChangedReason, "Provision", "%s", msg)
	}
}

func findCond(m *ichorv1alpha1.TalosMachine, t string) *metav1.Condition {
	for i := range m.Status.Conditions {
		if m.Status.Conditions[i].Type == t {
			return &m.Status.Conditions[i]
		}
	}

	return nil
}

// sendConfig sends the first configuration (it carries the CA keys of a
// control plane) after the fingerprint and identity checks, under the cluster
// lock for a control plane.
func (r *Reconciler) sendConfig(ctx context.Context, s *scope) (ctrl.Result, error) {
	m := s.machine

	if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
		ok, err := r.takeLock(ctx, m, "control plane "+m.Name+" joining")
		if err != nil || !ok {
			return ctrl.Result{RequeueAfter: lockWait}, err
		}
	}

	mn, err := r.maintenance(ctx, s)
	if err != nil {
		// Not in maintenance: a node that already runs this render (sent by a
		// controller that stopped before recording it, or whose answer was
		// lost) is followed, not sent to again.
		if errors.Is(err, errRunsOurConfig) || r.runsOurConfig(ctx, s) {
			r.markSent(m, s.now())

			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}

		m.Status.Stage = ichorv1alpha1.StageUnreachable
		progress(m, ichorv1alpha1.NodeUnreachableReason, fmt.Sprintf("the node at %s does not answer in maintenance mode: %v", m.Spec.Address, err))

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	if mn == nil {
		if s.before.Status.MaintenanceFingerprint != m.Status.MaintenanceFingerprint || !identityPaused(m) && identityPaused(s.before) {
			// Recorded or confirmed in this step: the next step may send.
			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}

		return ctrl.Result{RequeueAfter: r.MonitorInterval}, nil
	}
	defer mn.Close()

	if err := mn.Apply(ctx, s.state.Result.Bytes); err != nil {
		if status.Code(err) == codes.Unavailable {
			// The connection broke before the answer: the node may well
			// have taken the configuration (its maintenance API stops as it
			// leaves maintenance mode). Not a refusal: the next look finds
			// either the node in maintenance mode or running this
			// configuration (maintenance, runsOurConfig), and nothing is sent
			// before it has looked.
			progress(m, ichorv1alpha1.ProvisioningReason, fmt.Sprintf("the answer to the configuration sent to %s was lost (%s): the next look checks whether the node took it",
				m.Spec.Address, talos.Message(err)))

			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}

		progress(m, ichorv1alpha1.ApplyFailedReason, err.Error())
		warnf(r, m, ichorv1alpha1.ApplyFailedReason, "Provision", "the node refused the configuration: %v", err)

		return ctrl.Result{RequeueAfter: r.MonitorInterval}, nil
	}

	r.markSent(m, s.now())
	r.eventf(m, corev1.EventTypeNormal, "ConfigSent", "Provision",
		"sent the rendered configuration to %s in maintenance mode (maintenance certificate %s); following the install", m.Spec.Address, m.Status.MaintenanceFingerprint)

	return ctrl.Result{RequeueAfter: r.PollInterval}, nil
}

func (r *Reconciler) markSent(m *ichorv1alpha1.TalosMachine, now metav1.Time) {
	m.Status.ConfigSentAt = &now
	m.Status.Stage = ichorv1alpha1.StageInstalling
	// The configuration reconciler records the hash the node runs (it owns
	// the configuration fields) at its first look at the provisioned node.
	m.Status.ResetRequestedAt = nil
	setCond(m, ichorv1alpha1.ProvisionedCondition, metav1.ConditionFalse, ichorv1alpha1.InstallingReason, "the node stored its configuration; following its install")
	progress(m, ichorv1alpha1.InstallingReason, reinstallNote(m)+"the node stored its configuration; following its install")
}

func reinstallNote(m *ichorv1alpha1.TalosMachine) string {
	if c := findCond(m, ichorv1alpha1.ProvisionedCondition); c != nil && c.Reason == ichorv1alpha1.ReinstalledReason {
		return "re-installing the node (its disk was wiped or replaced): "
	}

	if m.Status.Reinstalls > 0 && m.Status.ConfigSentAt != nil && !provisioned(m) {
		return "re-installing the node (its disk was wiped or replaced): "
	}

	return ""
}

// errRunsOurConfig is maintenance's answer for a node that no longer answers
// in maintenance mode because it runs the cluster's configuration.
var errRunsOurConfig = errors.New("the node runs the cluster's configuration")

// runsOurConfig reports whether the node answers the cluster's API (so it
// has this cluster's configuration).
func (r *Reconciler) runsOurConfig(ctx context.Context, s *scope) bool {
	n, err := r.Nodes.Dial(ctx, s.machine.Spec.Address, s.state.Bundle)
	if err != nil {
		return false
	}
	defer n.Close()

	_, _, err = n.Stage(ctx)

	return err == nil
}

// follow watches the stage move to running, then waits for the join: an
// etcd voting member (control planes) and a Ready Node.
func (r *Reconciler) follow(ctx context.Context, s *scope) (ctrl.Result, error) {
	m := s.machine
	note := reinstallNote(m)

	n, err := r.Nodes.Dial(ctx, m.Spec.Address, s.state.Bundle)
	if err != nil {
		return ctrl.Result{}, err
	}
	defer n.Close()

	stage, _, err := n.Stage(ctx)
	if err != nil {
		// The node reboots after the install: down for a while is expected.
		if m.Status.Stage == ichorv1alpha1.StageInstalling || m.Status.Stage == "" {
			m.Status.Stage = ichorv1alpha1.StageRebooting
		}

		progress(m, ichorv1alpha1.InstallingReason, note+"the node does not answer yet (it reboots after the install)")

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	m.Status.Stage = stage

	if stage != ichorv1alpha1.StageRunning {
		progress(m, ichorv1alpha1.InstallingReason, note+"the node is "+stage)

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	// The join is recorded (with its Node name) only for this machine.
	v, err := r.verify(ctx, m, n, "the join")
	if v == nil {
		return ctrl.Result{RequeueAfter: r.PollInterval}, err
	}

	if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
		members, err := n.EtcdMembers(ctx)

		var self *talos.EtcdMember
		if err == nil {
			self = memberAt(members, m.Spec.Address)
		}

		if self == nil || self.Learner {
			progress(m, ichorv1alpha1.JoiningReason, note+"the node runs; waiting for its etcd member to join as a voter "+
				"(the first control plane waits for the etcd bootstrap of `ichor init`)")

			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}
	}

	k, err := r.Workload(ctx, s.state.Cluster, s.state.Bundle)
	if err != nil {
		progress(m, ichorv1alpha1.JoiningReason, note+"the node runs; the cluster's Kubernetes API does not answer yet: "+err.Error())

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	wctx, cancel := context.WithTimeout(ctx, workload.Timeout)
	defer cancel()

	node, err := workload.NodeAt(wctx, k, cmp.Or(v.Identity().NodeName, m.Status.NodeName), m.Spec.Address)
	if err != nil || node == nil || !workload.NodeReady(node) {
		progress(m, ichorv1alpha1.JoiningReason, note+"the node runs; waiting for its Kubernetes Node to be Ready")

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	if own := v.Identity().NodeName; own != "" && !strings.EqualFold(own, node.Name) {
		progress(m, ichorv1alpha1.JoiningReason, fmt.Sprintf("%sthe node runs as Node %s; the Node at %s is %s: waiting for its own Node", note, own, m.Spec.Address, node.Name))

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	m.Status.NodeName = node.Name
	m.Status.Installed = true

	reason, msg := ichorv1alpha1.JoinedReason, "the node installed Talos and joined the cluster"
	if note != "" {
		reason, msg = ichorv1alpha1.ReinstalledReason, fmt.Sprintf("re-installed the node at %s: its disk was wiped or replaced", s.now().UTC().Format(time.RFC3339))
	}

	setCond(m, ichorv1alpha1.ProvisionedCondition, metav1.ConditionTrue, reason, msg)
	nodeHealthy(m)

	if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
		// The join is recorded before the count is read (other machines see it).
		if err := s.persist(ctx); err != nil {
			return ctrl.Result{}, err
		}

		even, err := r.topology(ctx, m)
		if err != nil {
			return ctrl.Result{}, err
		}

		if !even {
			if err := r.releaseLock(ctx, m); err != nil {
				return ctrl.Result{}, err
			}
		}
	}

	r.eventf(m, corev1.EventTypeNormal, reason, "Provision", "%s; Node %s is Ready", msg, node.Name)

	return ctrl.Result{RequeueAfter: r.MonitorInterval}, nil
}

// memberAt finds the etcd member whose peer URL is on address.
func memberAt(members []talos.EtcdMember, address string) *talos.EtcdMember {
	want := net.ParseIP(address)

	for i := range members {
		for _, p := range members[i].PeerURLs {
			u, err := url.Parse(p)
			if err != nil {
				continue
			}

			if ip := net.ParseIP(u.Hostname()); ip != nil && ip.Equal(want) {
				return &members[i]
			}
		}
	}

	return nil
}

// guardMembers turns the member list into the guard's view, with each
// member's health read from its own control plane.
func (r *Reconciler) guardMembers(ctx context.Context, b *secrets.Bundle, members []talos.EtcdMember) []guard.EtcdMember {
	out := make([]guard.EtcdMember, 0, len(members))

	for _, mem := range members {
		healthy := false

		if addr := peerHost(mem); addr != "" {
			if n, err := r.Nodes.Dial(ctx, addr, b); err == nil {
				healthy = n.EtcdHealthy(ctx)
				n.Close()
			}
		}

		out = append(out, guard.EtcdMember{ID: mem.ID, Name: mem.Hostname, Learner: mem.Learner, Healthy: healthy})
	}

	return out
}

func peerHost(mem talos.EtcdMember) string {
	for _, p := range mem.PeerURLs {
		if u, err := url.Parse(p); err == nil && u.Hostname() != "" {
			return u.Hostname()
		}
	}

	return ""
}
