package api

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/download"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/nodeop"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// RotationCredentialsTimeout bounds the wait for the controller to sign a
// rotation's credentials.
const RotationCredentialsTimeout = 30 * time.Second

// caRotation builds the operation a request asks for and decides it as
// `ichor cluster rotate-ca` does: the shared checks, whether this release
// runs it, and the user's verbs.
func (s *OperationService) caRotation(ctx context.Context, talosOnly, kubernetesOnly, aggregator bool) (*ichorv1alpha1.TalosOperation, decision, error) {
	op := nodeop.CARotation(s.Clients.Namespace, s.ClusterName, !kubernetesOnly, !talosOnly, aggregator, false)

	if r := guard.CheckRunnable(op); r != nil {
		return op, decision{refusals: []guard.Refusal{*r}, code: codes.InvalidArgument}, nil //nolint:nilerr // a refusal is the answer, not a failure
	}

	facts, err := guard.LoadOperationFacts(ctx, s.Clients.User, op)
	if err != nil {
		return nil, decision{}, err
	}

	d, err := s.decideOperation(ctx, op, facts)

	return op, d, err
}

// PreviewCARotation implements OperationService: the rotation's stages
// (nodeop.CARotationSteps) and what refuses one now.
func (s *OperationService) PreviewCARotation(ctx context.Context, req *ichorv1.PreviewCARotationRequest) (*ichorv1.PreviewCARotationResponse, error) {
	const what = "previewing a CA rotation of the cluster"

	op, d, err := s.caRotation(ctx, req.GetTalosOnly(), req.GetKubernetesOnly(), req.GetAggregator())
	if err != nil {
		return nil, apiError(ctx, err, what)
	}

	return &ichorv1.PreviewCARotationResponse{
		Cluster: s.ClusterName, Steps: nodeop.CARotationSteps(op),
		Refusals: refusalsToProto(d.refusals), Allowed: len(d.refusals) == 0,
	}, nil
}

// StartCARotation implements OperationService: after the typed cluster name
// and the shared checks, it creates the ca-rotation as the signed-in user.
func (s *OperationService) StartCARotation(ctx context.Context, req *ichorv1.StartCARotationRequest) (*ichorv1.StartCARotationResponse, error) {
	what := "rotating the CAs of cluster " + s.ClusterName
	if err := confirmedCluster(what, s.ClusterName, req.GetConfirmClusterName(), "created"); err != nil {
		return nil, err
	}

	if req.GetTalosOnly() && req.GetKubernetesOnly() {
		return nil, invalid("%s: talos_only and kubernetes_only exclude each other (without either, both CAs rotate); nothing was created", what)
	}

	if err := s.Clients.Authorize(ctx, "create", resOperations); err != nil {
		return nil, apiError(ctx, err, what)
	}

	op, d, err := s.caRotation(ctx, req.GetTalosOnly(), req.GetKubernetesOnly(), req.GetAggregator())
	if err != nil {
		return nil, apiError(ctx, err, what)
	}

	if len(d.refusals) > 0 {
		return nil, refused(d.code, what, d.refusals)
	}

	if err := s.Clients.User.Create(ctx, op); err != nil {
		return nil, apiError(ctx, err, what)
	}

	return &ichorv1.StartCARotationResponse{Operation: operationToProto(op)}, nil
}

// DownloadRotationCredentials implements OperationService: the key pair is
// made here, the TalosCredentialRequest created as the user (the webhook
// checks `download` on talosclusters/credentials and names them; the
// controller records the Warning Event as it signs), and the talosconfig and
// kubeconfig go to the browser only.
func (s *OperationService) DownloadRotationCredentials(ctx context.Context, req *ichorv1.DownloadRotationCredentialsRequest) (*ichorv1.DownloadRotationCredentialsResponse, error) {
	name := strings.TrimSpace(req.GetOperation())
	what := "downloading the credentials of CA rotation " + name

	if name == "" {
		return nil, invalid("downloading the credentials of a CA rotation: operation is required: name the ca-rotation operation; nothing was requested")
	}

	// No role holds it by default (guard.RotationCredentialsGrant says how
	// it is granted); the webhook checks it again on the request.
	if err := s.Clients.AuthorizeSubresource(ctx, guard.VerbDownload, guard.ResourceTalosClusters, guard.SubresourceCredentials); err != nil {
		return nil, status.Errorf(codes.PermissionDenied, "%s: %v; %s", what, err, guard.RotationCredentialsGrant(s.Clients.Namespace))
	}

	op := &ichorv1alpha1.TalosOperation{}
	if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, op); err != nil {
		return nil, apiError(ctx, err, what)
	}

	if op.Spec.Type != ichorv1alpha1.OperationCARotation || op.Spec.ClusterName != s.ClusterName {
		return nil, invalid("%s: it is not a ca-rotation of cluster %s; nothing was requested", what, s.ClusterName)
	}

	c := &ichorv1alpha1.TalosCluster{}
	if err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: s.ClusterName}, c); err != nil {
		return nil, apiError(ctx, err, what)
	}

	server, err := render.Endpoint(c.Spec.Endpoint)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
	}

	machines, err := s.clusterMachines(ctx)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}

	list := make([]ichorv1alpha1.TalosMachine, 0, len(machines))
	for _, m := range machines {
		list = append(list, *m)
	}

	endpoints := download.TalosconfigEndpoints(list, s.ClusterName, 0)
	if len(endpoints) == 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: the cluster has no running control plane with an address for the talosconfig's endpoints", what)
	}

	key, err := download.NewTalosconfigKey()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}

	tcr := download.RotationRequest(s.Clients.Namespace, s.ClusterName, op.Name, key)
	if err := s.Clients.User.Create(ctx, tcr); err != nil {
		return nil, apiError(ctx, err, what)
	}

	wctx, cancel := context.WithTimeout(ctx, RotationCredentialsTimeout)
	defer cancel()

	signed, err := s.waitSigned(wctx, tcr.Name, what)
	if err != nil {
		return nil, err
	}

	talosconfig, err := key.Talosconfig(s.ClusterName, endpoints, signed)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}

	kubeconfig, err := key.Kubeconfig(s.ClusterName, server, signed)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}

	out := &ichorv1.DownloadRotationCredentialsResponse{Talosconfig: talosconfig, Kubeconfig: kubeconfig, Request: signed.Name}
	if signed.Status.ExpiresAt != nil {
		out.ExpiresAt = timestamppb.New(signed.Status.ExpiresAt.Time)
	}

	return out, nil
}

// waitSigned polls the request (as the user who created it) until the
// controller signs or denies it.
func (s *OperationService) waitSigned(ctx context.Context, name, what string) (*ichorv1alpha1.TalosCredentialRequest, error) {
	delay := 50 * time.Millisecond

	for {
		tcr := &ichorv1alpha1.TalosCredentialRequest{}
		if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, tcr); err == nil {
			if done, derr := download.Answered(tcr); derr != nil {
				return nil, status.Errorf(codes.FailedPrecondition, "%s: %v", what, derr)
			} else if done && apimeta.IsStatusConditionTrue(tcr.Status.Conditions, ichorv1alpha1.IssuedCondition) {
				return tcr, nil
			}
		}

		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.Unavailable, "%s: the controller did not sign TalosCredentialRequest %s in time: is ichor-controller running?", what, name)
		case <-time.After(delay):
		}

		delay = min(delay*2, time.Second)
	}
}

// keyRotation builds the operation a request asks for and decides it as
// `ichor cluster rotate-keys` does.
func (s *OperationService) keyRotation(ctx context.Context, serviceAccountOnly, secretboxOnly bool) (*ichorv1alpha1.TalosOperation, decision, error) {
	op := nodeop.KeyRotation(s.Clients.Namespace, s.ClusterName, !secretboxOnly, !serviceAccountOnly)

	if r := guard.CheckRunnable(op); r != nil {
		return op, decision{refusals: []guard.Refusal{*r}, code: codes.InvalidArgument}, nil //nolint:nilerr // a refusal is the answer, not a failure
	}

	facts, err := guard.LoadOperationFacts(ctx, s.Clients.User, op)
	if err != nil {
		return nil, decision{}, err
	}

	d, err := s.decideOperation(ctx, op, facts)

	return op, d, err
}

// PreviewKeyRotation implements OperationService: the rotation's stages
// (nodeop.KeyRotationSteps) and what refuses one now.
func (s *OperationService) PreviewKeyRotation(ctx context.Context, req *ichorv1.PreviewKeyRotationRequest) (*ichorv1.PreviewKeyRotationResponse, error) {
	const what = "previewing a key rotation of the cluster"

	_, d, err := s.keyRotation(ctx, req.GetServiceAccountOnly(), req.GetSecretboxOnly())
	if err != nil {
		return nil, apiError(ctx, err, what)
	}

	return &ichorv1.PreviewKeyRotationResponse{
		Cluster: s.ClusterName, Steps: nodeop.KeyRotationSteps(),
		Refusals: refusalsToProto(d.refusals), Allowed: len(d.refusals) == 0,
	}, nil
}

// StartKeyRotation implements OperationService: after the typed cluster
// name and the shared checks, it creates the key-rotation as the signed-in
// user.
func (s *OperationService) StartKeyRotation(ctx context.Context, req *ichorv1.StartKeyRotationRequest) (*ichorv1.StartKeyRotationResponse, error) {
	what := "rotating the keys of cluster " + s.ClusterName
	if err := confirmedCluster(what, s.ClusterName, req.GetConfirmClusterName(), "created"); err != nil {
		return nil, err
	}

	if req.GetServiceAccountOnly() && req.GetSecretboxOnly() {
		return nil, invalid("%s: service_account_only and secretbox_only exclude each other (without either, both keys rotate); nothing was created", what)
	}

	if err := s.Clients.Authorize(ctx, "create", resOperations); err != nil {
		return nil, apiError(ctx, err, what)
	}

	op, d, err := s.keyRotation(ctx, req.GetServiceAccountOnly(), req.GetSecretboxOnly())
	if err != nil {
		return nil, apiError(ctx, err, what)
	}

	if len(d.refusals) > 0 {
		return nil, refused(d.code, what, d.refusals)
	}

	if err := s.Clients.User.Create(ctx, op); err != nil {
		return nil, apiError(ctx, err, what)
	}

	return &ichorv1.StartKeyRotationResponse{Operation: operationToProto(op)}, nil
}

// confirmedCluster checks the cluster's name a user typed to consent to a
// dangerous operation; the error says what to type and that nothing was
// done (done: "created" or "changed").
func confirmedCluster(what, cluster, typed, done string) error {
	got := strings.TrimSpace(typed)
	if got == cluster {
		return nil
	}

	if got == "" {
		return invalid("%s: confirm_cluster_name is required: type the cluster's name, %q, to confirm; nothing was %s", what, cluster, done)
	}

	return invalid("%s: the confirmation %q is not the cluster's name; type %q to confirm; nothing was %s", what, got, cluster, done)
}
