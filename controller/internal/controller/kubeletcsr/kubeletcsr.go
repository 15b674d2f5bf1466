// Package kubeletcsr approves the kubelets' serving-certificate requests of
// the clusters that ask for them (spec.security.kubeletServingCertificates):
// the system layer renders the kubelet's rotate-server-certificates, and the
// kubelet then waits for its kubernetes.io/kubelet-serving CSR. Nothing else
// approves those (Kubernetes's controller-manager approves client
// certificates only), so without this reconciler `kubectl logs` and `exec`
// would fail on every node.
//
// A request is approved only when it comes from the node itself (user
// system:node:<name> in group system:nodes), names that node in its subject,
// asks for server-auth usage only, and lists only that node's own names (its
// Node name and hostname) and addresses (the TalosMachine's address and the
// addresses Talos reports for the node, read from the node over the Talos
// API, never from the Kubernetes Node, which the kubelet writes itself)
// (architecture, "Typed configuration": the controller approves each
// kubelet's serving-certificate request itself, only for that node's own
// names and addresses, read from the node). A request that fails a check is
// denied with the reason; one from a node Ichor does not know yet is left
// pending for the next pass.
package kubeletcsr

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=talosmachines,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ControllerName names the controller and its Events.
const ControllerName = "kubelet-serving-csr"

// DefaultInterval is how often a cluster's pending requests are looked at.
const DefaultInterval = 30 * time.Second

// Signer is the signer of kubelet serving certificates.
const Signer = certificatesv1.KubeletServingSignerName

// Reconciler approves kubelet serving-certificate requests.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Nodes dials configured nodes; nil means a Dialer on Talos's port.
	Nodes *talos.Dialer
	// Interval is the polling period; zero means DefaultInterval.
	Interval time.Duration

	skeleton *reconcile.Controller[*ichorv1alpha1.TalosCluster]
}

// SetupWithManager registers the reconciler on TalosClusters.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}

	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}

	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}

	if r.Nodes == nil {
		r.Nodes = &talos.Dialer{}
	}

	if r.Interval <= 0 {
		r.Interval = DefaultInterval
	}

	r.skeleton = r.controller()

	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ichorv1alpha1.TalosCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// controller is the approver on the skeleton: it writes nothing to the
// cluster's status, and the cluster's spec.paused stops it (a paused
// cluster's requests stay pending).
func (r *Reconciler) controller() *reconcile.Controller[*ichorv1alpha1.TalosCluster] {
	return &reconcile.Controller[*ichorv1alpha1.TalosCluster]{
		Name: ControllerName, Client: r.Client, APIReader: r.APIReader,
		New:    func() *ichorv1alpha1.TalosCluster { return &ichorv1alpha1.TalosCluster{} },
		Phases: []reconcile.Phase[*ichorv1alpha1.TalosCluster]{r.approve},
	}
}

// Reconcile runs the skeleton.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.skeleton == nil {
		r.skeleton = r.controller()
	}

	return r.skeleton.Reconcile(ctx, req)
}

// approve looks at the cluster's pending kubelet serving requests.
func (r *Reconciler) approve(ctx context.Context, s *reconcile.Scope[*ichorv1alpha1.TalosCluster]) (ctrl.Result, error) {
	c := s.Object
	if !c.Spec.Security.KubeletServingCertificates {
		return ctrl.Result{}, nil
	}

	log := ctrl.LoggerFrom(ctx)

	b, err := machinestate.LoadBundle(ctx, r.APIReader, c)
	if err != nil {
		log.V(1).Info("no bundle to reach the cluster with", "reason", err.Error())

		return ctrl.Result{RequeueAfter: r.Interval}, nil
	}

	machines, err := r.machines(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}

	var cps []ichorv1alpha1.TalosMachine

	for _, m := range machines {
		if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
			cps = append(cps, m)
		}
	}

	k, err := workload.Client(ctx, r.Nodes, c.Name, cps, b)
	if err != nil {
		log.V(1).Info("the cluster's Kubernetes API is not reachable yet", "reason", err.Error())

		return ctrl.Result{RequeueAfter: r.Interval}, nil
	}

	csrs, err := k.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: "spec.signerName=" + Signer})
	if err != nil {
		return ctrl.Result{RequeueAfter: r.Interval}, nil //nolint:nilerr // the workload API may be restarting; the next pass retries
	}

	for i := range csrs.Items {
		csr := &csrs.Items[i]
		if decided(csr) {
			continue
		}

		switch err := r.decide(ctx, c, k, csr, machines, b); {
		case errors.Is(err, errUnknownNode):
			log.V(1).Info("left pending: its node is not a machine of the cluster yet", "csr", csr.Name, "user", csr.Spec.Username)
		case err != nil:
			log.Error(err, "deciding a kubelet serving certificate request", "csr", csr.Name)
		}
	}

	return ctrl.Result{RequeueAfter: r.Interval}, nil
}

func (r *Reconciler) machines(ctx context.Context, c *ichorv1alpha1.TalosCluster) ([]ichorv1alpha1.TalosMachine, error) {
	return machinestate.Machines(ctx, r.Client, c.Namespace, c.Name, func(m *ichorv1alpha1.TalosMachine) bool {
		return m.Spec.Approval.State == ichorv1alpha1.ApprovalApproved && m.Spec.Address != "" && m.DeletionTimestamp.IsZero()
	})
}

func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
			return true
		}
	}

	return false
}

// errUnknownNode leaves a request pending: its node may not be recorded yet.
var errUnknownNode = errors.New("no machine of the cluster is this node yet")

func (r *Reconciler) decide(ctx context.Context, c *ichorv1alpha1.TalosCluster, k kubernetes.Interface, csr *certificatesv1.CertificateSigningRequest,
	machines []ichorv1alpha1.TalosMachine, b *secrets.Bundle,
) error {
	node, ok := strings.CutPrefix(csr.Spec.Username, "system:node:")
	if !ok || node == "" || !slices.Contains(csr.Spec.Groups, "system:nodes") {
		return r.deny(ctx, c, k, csr, fmt.Sprintf("requested by %q, not by a node (system:node:<name> in group system:nodes)", csr.Spec.Username))
	}

	m := machineOf(machines, node)
	if m == nil {
		return errUnknownNode
	}

	names, addrs := r.identity(ctx, m, node, b)

	if why := Check(csr, node, names, addrs); why != "" {
		return r.deny(ctx, c, k, csr, why)
	}

	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "IchorApproved",
		Message:        fmt.Sprintf("Ichor approved the serving certificate of node %s (machine %s): its own names and addresses", node, m.Name),
		LastUpdateTime: metav1.Now(),
	})

	if _, err := k.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("approve %s: %w", csr.Name, err)
	}

	r.Recorder.Eventf(m, c, corev1.EventTypeNormal, "KubeletServingCertificateApproved", "Approve",
		"approved the kubelet serving certificate request %s of node %s", csr.Name, node)

	return nil
}

func (r *Reconciler) deny(ctx context.Context, c *ichorv1alpha1.TalosCluster, k kubernetes.Interface, csr *certificatesv1.CertificateSigningRequest, why string) error {
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "IchorDenied",
		Message: "Ichor denied this kubelet serving certificate request: " + why, LastUpdateTime: metav1.Now(),
	})

	if _, err := k.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("deny %s: %w", csr.Name, err)
	}

	r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "KubeletServingCertificateDenied", "Deny",
		"denied the kubelet serving certificate request %s: %s", csr.Name, why)

	return nil
}

// machineOf is the machine whose Node is node: by the Node name the
// provisioning recorded, else by its hostname (Talos names the Node after
// the lower-cased hostname).
func machineOf(machines []ichorv1alpha1.TalosMachine, node string) *ichorv1alpha1.TalosMachine {
	for i := range machines {
		m := &machines[i]
		if m.Status.NodeName == node || (m.Status.NodeName == "" && strings.ToLower(m.Spec.Hostname) == node) {
			return m
		}
	}

	return nil
}

// identity is the node's own names and addresses: its Node name and
// hostname; the machine's address and what Talos reports as the node's
// addresses (NodeAddress "current", best effort).
func (r *Reconciler) identity(ctx context.Context, m *ichorv1alpha1.TalosMachine, node string, b *secrets.Bundle) (names []string, addrs []netip.Addr) {
	names = []string{node}
	if h := strings.ToLower(m.Spec.Hostname); h != "" && h != node {
		names = append(names, h)
	}

	if a, err := netip.ParseAddr(m.Spec.Address); err == nil {
		addrs = append(addrs, a)
	}

	n, err := r.Nodes.Dial(ctx, m.Spec.Address, b)
	if err != nil {
		return names, addrs
	}
	defer n.Close()

	na, err := safe.StateGetByID[*network.NodeAddress](ctx, n.Client().COSI, network.NodeAddressCurrentID)
	if err != nil {
		return names, addrs
	}

	for _, p := range na.TypedSpec().Addresses {
		addrs = append(addrs, p.Addr())
	}

	return names, addrs
}

// Check is "" when the request asks only for what node may have: subject
// CN system:node:<node> in O system:nodes, server-auth usage (with digital
// signature and key encipherment), DNS names among names and IP addresses
// among addrs, nothing else; otherwise it says what is wrong.
func Check(csr *certificatesv1.CertificateSigningRequest, node string, names []string, addrs []netip.Addr) string {
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return "the request is not a PEM certificate request"
	}

	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return "the request does not parse"
	}

	if err := req.CheckSignature(); err != nil {
		return "the request's signature does not verify"
	}

	if req.Subject.CommonName != "system:node:"+node || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return fmt.Sprintf("the subject is %q, not CN=system:node:%s,O=system:nodes", req.Subject.String(), node)
	}

	for _, u := range csr.Spec.Usages {
		if u != certificatesv1.UsageDigitalSignature && u != certificatesv1.UsageKeyEncipherment && u != certificatesv1.UsageServerAuth {
			return fmt.Sprintf("it asks for usage %q; a kubelet serving certificate is for server auth only", u)
		}
	}

	if !slices.Contains(csr.Spec.Usages, certificatesv1.UsageServerAuth) {
		return "it does not ask for server auth"
	}

	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return "it asks for e-mail or URI names"
	}

	if len(req.DNSNames) == 0 && len(req.IPAddresses) == 0 {
		return "it names no DNS name or IP address"
	}

	for _, d := range req.DNSNames {
		if !slices.Contains(names, strings.ToLower(d)) {
			return fmt.Sprintf("DNS name %q is not one of node %s's own names (%s)", d, node, strings.Join(names, ", "))
		}
	}

	for _, ip := range req.IPAddresses {
		a, ok := netip.AddrFromSlice(ip)
		if !ok || !slices.Contains(addrs, a.Unmap()) {
			return fmt.Sprintf("IP address %s is not one of node %s's own addresses", ip, node)
		}
	}

	return ""
}
