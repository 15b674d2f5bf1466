package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/privileged"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
)

// PatchService implements ichorv1.PatchServiceServer: the Configuration
// page's patches, their impact preview and their writes as the signed-in user.
type PatchService struct {
	ichorv1.UnimplementedPatchServiceServer
	Deps

	bundles syntheticBundles
}

// strict asks the API server to refuse an unknown field rather than prune it
// (architecture, "Typed configuration": Ichor's clients report it loudly).
var strict = client.FieldValidation("Strict")

// layerOrder is the order of the layers on the page: bottom-up, as they apply.
var layerOrder = map[string]int{
	ichorv1alpha1.LayerCluster: 0, ichorv1alpha1.LayerRole: 1, ichorv1alpha1.LayerSelector: 2, ichorv1alpha1.LayerMachine: 3,
}

// ListPatches implements PatchService.
func (s *PatchService) ListPatches(ctx context.Context, _ *ichorv1.ListPatchesRequest) (*ichorv1.ListPatchesResponse, error) {
	const what = "listing the configuration patches"
	for _, res := range []string{resPatches, resMachines} {
		if err := s.Clients.Authorize(ctx, "list", res); err != nil {
			return nil, apiError(ctx, err, what)
		}
	}
	list := &ichorv1alpha1.TalosConfigPatchList{}
	if err := s.Clients.Cache.List(ctx, list, client.InNamespace(s.Clients.Namespace)); err != nil {
		return nil, apiError(ctx, err, what)
	}
	items := make([]*ichorv1alpha1.TalosConfigPatch, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Spec.ClusterName == s.ClusterName {
			items = append(items, &list.Items[i])
		}
	}
	sort.Slice(items, func(i, j int) bool {
		a, b := items[i], items[j]
		if layerOrder[a.Spec.Layer] != layerOrder[b.Spec.Layer] {
			return layerOrder[a.Spec.Layer] < layerOrder[b.Spec.Layer]
		}
		if a.Spec.Priority != b.Spec.Priority {
			return a.Spec.Priority < b.Spec.Priority
		}
		return a.Name < b.Name
	})
	ms, err := s.clusterMachines(ctx)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	out := &ichorv1.ListPatchesResponse{}
	for _, p := range items {
		cp, err := patchToProto(p)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "%s: %v", what, err)
		}
		cp.MatchedMachines = 0
		for _, m := range ms {
			if ok, err := render.Targets(p, m); err == nil && ok {
				cp.MatchedMachines++
			}
		}
		out.Patches = append(out.Patches, cp)
	}
	// What the console shows controls for; the API server and the webhook
	// still decide each write.
	out.CanWrite = s.Clients.Authorize(ctx, "create", resPatches) == nil
	out.CanWritePrivileged = s.Clients.AuthorizeSubresource(ctx, guard.VerbUpdate, guard.ResourceTalosConfigPatches, guard.SubresourcePrivileged) == nil
	return out, nil
}

// PreviewPatch implements PatchService.
func (s *PatchService) PreviewPatch(ctx context.Context, req *ichorv1.PreviewPatchRequest) (*ichorv1.PreviewPatchResponse, error) {
	name := req.GetPatch().GetName()
	what := "previewing TalosConfigPatch " + name
	if name == "" {
		return nil, invalid("%s: patch.name is required", what)
	}
	for _, res := range []string{resMachines, resClusters, resPatches} {
		if err := s.Clients.Authorize(ctx, "list", res); err != nil {
			return nil, apiError(ctx, err, what)
		}
	}
	edit, err := s.edit(ctx, req.GetPatch(), req.GetDelete())
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	imp, err := s.preview(ctx, edit)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	out := impactToProto(imp)
	out.Allowed = len(imp.Privileged) == 0 || s.privilegedAllowed(ctx) == nil
	return out, nil
}

// CreatePatch implements PatchService.
func (s *PatchService) CreatePatch(ctx context.Context, req *ichorv1.CreatePatchRequest) (*ichorv1.CreatePatchResponse, error) {
	what := "creating TalosConfigPatch " + req.GetPatch().GetName()
	p, err := s.patchFromProto(req.GetPatch())
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	if err := s.check(ctx, what, plan.PatchEdit{New: p}); err != nil {
		return nil, err
	}
	if err := s.Clients.User.Create(ctx, p, strict); err != nil {
		return nil, apiError(ctx, err, what)
	}
	cp, err := patchToProto(p)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%s: %v", what, err)
	}
	return &ichorv1.CreatePatchResponse{Patch: cp}, nil
}

// UpdatePatch implements PatchService.
func (s *PatchService) UpdatePatch(ctx context.Context, req *ichorv1.UpdatePatchRequest) (*ichorv1.UpdatePatchResponse, error) {
	what := "changing TalosConfigPatch " + req.GetName()
	cp := req.GetPatch()
	if cp == nil {
		return nil, invalid("%s: patch is required", what)
	}
	if cp.GetName() != "" && cp.GetName() != req.GetName() {
		return nil, invalid("%s: patch.name %q differs; a patch cannot be renamed, create a new one", what, cp.GetName())
	}
	named, _ := proto.Clone(cp).(*ichorv1.ConfigPatch)
	named.Name = req.GetName()
	p, err := s.patchFromProto(named)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	old, err := s.current(ctx, p.Name)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	if old.Spec.ClusterName != s.ClusterName {
		return nil, status.Errorf(codes.NotFound, "%s: it belongs to cluster %q, not %q", what, old.Spec.ClusterName, s.ClusterName)
	}
	updated := old.DeepCopy()
	updated.Spec = p.Spec
	if rv := req.GetPatch().GetResourceVersion(); rv != "" {
		updated.ResourceVersion = rv
	}
	if err := s.check(ctx, what, plan.PatchEdit{Old: old, New: updated}); err != nil {
		return nil, err
	}
	if err := s.Clients.User.Update(ctx, updated, strict); err != nil {
		return nil, apiError(ctx, err, what)
	}
	out, err := patchToProto(updated)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%s: %v", what, err)
	}
	return &ichorv1.UpdatePatchResponse{Patch: out}, nil
}

// DeletePatch implements PatchService.
func (s *PatchService) DeletePatch(ctx context.Context, req *ichorv1.DeletePatchRequest) (*ichorv1.DeletePatchResponse, error) {
	what := "deleting TalosConfigPatch " + req.GetName()
	if req.GetName() == "" {
		return nil, invalid("%s: name is required", what)
	}
	old, err := s.current(ctx, req.GetName())
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	if old.Spec.ClusterName != s.ClusterName {
		return nil, status.Errorf(codes.NotFound, "%s: it belongs to cluster %q, not %q", what, old.Spec.ClusterName, s.ClusterName)
	}
	if err := s.checkPrivileged(ctx, what, plan.PatchEdit{Old: old}); err != nil {
		return nil, err
	}
	rv := req.GetResourceVersion()
	if rv == "" {
		rv = old.ResourceVersion
	}
	if err := s.Clients.User.Delete(ctx, old, client.Preconditions{ResourceVersion: &rv}); err != nil {
		return nil, apiError(ctx, err, what)
	}
	return &ichorv1.DeletePatchResponse{}, nil
}

// current reads a patch as the signed-in user, fresh from the API server
// (an update replaces exactly what was read).
func (s *PatchService) current(ctx context.Context, name string) (*ichorv1alpha1.TalosConfigPatch, error) {
	p := &ichorv1alpha1.TalosConfigPatch{}
	if err := s.Clients.User.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: name}, p); err != nil {
		return nil, err
	}
	return p, nil
}

// edit is the proposed write of a preview: the cached patch of the name, if
// any, is what it replaces.
func (s *PatchService) edit(ctx context.Context, cp *ichorv1.ConfigPatch, del bool) (plan.PatchEdit, error) {
	var e plan.PatchEdit
	old := &ichorv1alpha1.TalosConfigPatch{}
	switch err := s.Clients.Cache.Get(ctx, client.ObjectKey{Namespace: s.Clients.Namespace, Name: cp.GetName()}, old); {
	case apierrors.IsNotFound(err):
		if del {
			return e, err
		}
	case err != nil:
		return e, err
	default:
		e.Old = old
	}
	if del {
		return e, nil
	}
	p, err := s.patchFromProto(cp)
	if err != nil {
		return e, err
	}
	if e.Old != nil {
		p.ObjectMeta = *e.Old.ObjectMeta.DeepCopy()
	}
	e.New = p
	return e, nil
}

// preview runs plan.Preview over the cluster's machines with a synthetic
// secrets bundle (ichor-ui reads no Secret that holds a CA key; both sides of
// the comparison use the same one).
func (s *PatchService) preview(ctx context.Context, e plan.PatchEdit) (plan.Impact, error) {
	stub := &ichorv1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Namespace: s.Clients.Namespace}}
	stub.Spec.ClusterName = s.ClusterName
	in, err := render.LoadInput(ctx, s.Clients.Cache, stub)
	if err != nil {
		return plan.Impact{}, err
	}
	b, err := s.bundles.get(in.Cluster.Spec.VersionContract)
	if err != nil {
		return plan.Impact{}, status.Errorf(codes.FailedPrecondition, "%v", err)
	}
	in.Bundle = b[0]
	ms, err := s.clusterMachines(ctx)
	if err != nil {
		return plan.Impact{}, err
	}
	machines := make([]ichorv1alpha1.TalosMachine, 0, len(ms))
	for _, m := range ms {
		machines = append(machines, *m)
	}
	return plan.Preview(plan.PreviewInput{Base: in, Machines: machines, Edit: e})
}

// check refuses a write the privileged rule refuses or after which a
// machine's configuration would not render or validate; nothing is written.
func (s *PatchService) check(ctx context.Context, what string, e plan.PatchEdit) error {
	if err := s.checkPrivileged(ctx, what, e); err != nil {
		return err
	}
	imp, err := s.preview(ctx, e)
	if err != nil {
		return apiError(ctx, err, what)
	}
	var refusals []guard.Refusal
	for _, m := range imp.Machines {
		for _, msg := range m.Errors {
			refusals = append(refusals, guard.Refusal{
				Field:  "spec.documents",
				Rule:   fmt.Sprintf("machine %s would get a configuration Talos refuses: %s", m.Machine, msg),
				WayOut: "correct the field it names, then preview again (the Preview button, `ichor config diff --with FILE`)",
			})
		}
	}
	if len(refusals) > 0 {
		return refused(codes.InvalidArgument, what, refusals)
	}
	return nil
}

// checkPrivileged refuses a write of privileged configuration by a user
// without `update` on talosconfigpatches/privileged, as the admission
// webhook does (guard.PatchRequirements), so the console shows the same
// message even where the webhook is off.
func (s *PatchService) checkPrivileged(ctx context.Context, what string, e plan.PatchEdit) error {
	reqs := guard.PatchRequirements(e.Old, e.New)
	if len(reqs) == 0 {
		return nil
	}
	err := s.privilegedAllowed(ctx)
	if err == nil {
		return nil
	}
	var forbidden *kube.Forbidden
	if !errors.As(err, &forbidden) {
		return apiError(ctx, err, what)
	}
	user := ""
	if id, ok := identity.From(ctx); ok {
		user = id.Username
	}
	refusals := make([]guard.Refusal, 0, len(reqs))
	for _, r := range reqs {
		refusals = append(refusals, r.Refusal(user))
	}
	return refused(codes.PermissionDenied, what, refusals)
}

func (s *PatchService) privilegedAllowed(ctx context.Context) error {
	return s.Clients.AuthorizeSubresource(ctx, guard.VerbUpdate, guard.ResourceTalosConfigPatches, guard.SubresourcePrivileged)
}

// patchFromProto builds the TalosConfigPatch of the cluster from the
// console's form; an unknown field of a document is refused by name.
func (s *PatchService) patchFromProto(cp *ichorv1.ConfigPatch) (*ichorv1alpha1.TalosConfigPatch, error) {
	if cp.GetName() == "" {
		return nil, invalid("patch.name is required")
	}
	p := &ichorv1alpha1.TalosConfigPatch{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Clients.Namespace, Name: cp.GetName()},
		Spec: ichorv1alpha1.TalosConfigPatchSpec{
			ClusterName: s.ClusterName, Layer: cp.GetLayer(), Priority: cp.GetPriority(),
			Target: ichorv1alpha1.PatchTarget{Role: cp.GetTargetRole(), MachineName: cp.GetTargetMachine()},
		},
	}
	if sel := strings.TrimSpace(cp.GetTargetSelectorJson()); sel != "" && sel != "null" {
		p.Spec.Target.Selector = &metav1.LabelSelector{}
		if err := strictJSON(sel, p.Spec.Target.Selector); err != nil {
			return nil, invalid("patch.targetSelectorJson is not a label selector (matchLabels, matchExpressions): %v", err)
		}
	}
	if docs := strings.TrimSpace(cp.GetDocumentsJson()); docs != "" && docs != "null" {
		if err := strictJSON(docs, &p.Spec.Documents); err != nil {
			return nil, invalid("patch.documentsJson does not fit the typed schema of spec.documents "+
				"(secret fields and raw YAML are not part of it): %v", err)
		}
	}
	return p, nil
}

// strictJSON decodes refusing unknown fields, and anything after the value.
func strictJSON(s string, v any) error {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("unexpected data after the value")
	}
	return nil
}

// patchToProto is the console's form of a patch.
func patchToProto(p *ichorv1alpha1.TalosConfigPatch) (*ichorv1.ConfigPatch, error) {
	docs := p.Spec.Documents
	if docs == nil {
		docs = []mirror.PatchDocument{}
	}
	d, err := json.Marshal(docs)
	if err != nil {
		return nil, err
	}
	out := &ichorv1.ConfigPatch{
		Name: p.Name, Layer: p.Spec.Layer, Priority: p.Spec.Priority,
		TargetRole: p.Spec.Target.Role, TargetMachine: p.Spec.Target.MachineName,
		DocumentsJson: string(d), ResourceVersion: p.ResourceVersion,
	}
	if sel := p.Spec.Target.Selector; sel != nil {
		b, err := json.Marshal(sel)
		if err != nil {
			return nil, err
		}
		out.TargetSelectorJson = string(b)
	}
	seen := map[string]bool{}
	for _, f := range privileged.InPatch(p) {
		if !seen[f.Path] {
			seen[f.Path] = true
			out.PrivilegedPaths = append(out.PrivilegedPaths, f.Path)
		}
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, ichorv1alpha1.ValidCondition); c != nil && c.Status == metav1.ConditionFalse {
		out.InvalidMessage = c.Message
	}
	return out, nil
}

func impactToProto(imp plan.Impact) *ichorv1.PreviewPatchResponse {
	out := &ichorv1.PreviewPatchResponse{Valid: imp.Valid()}
	for _, m := range imp.Machines {
		mi := &ichorv1.MachineImpact{
			Machine: m.Machine, Role: m.Role, Mode: m.Mode, WaitsForRollout: m.WaitsForRollout,
			Errors: m.Errors, Warnings: m.Warnings,
		}
		for _, c := range m.Changes {
			mi.Changes = append(mi.Changes, &ichorv1.PathChange{Path: c.Path.String(), Op: string(c.Op), Class: c.Class.String()})
		}
		out.Machines = append(out.Machines, mi)
	}
	for _, r := range imp.Privileged {
		out.Privileged = append(out.Privileged, &ichorv1.PrivilegedRequirement{Field: r.Field, Permission: r.Permission.String(), Action: r.Action})
	}
	return out
}
