package api

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/privileged"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

// syntheticBundles are two secrets bundles made in memory per version
// contract. ichor-ui reads no Secret that holds a CA key, so it renders the
// effective configuration with made-up secrets twice: a value that differs
// between the two renders comes from the secrets bundle and is masked, like
// the secrets machinery's RedactSecrets masks.
type syntheticBundles struct {
	mu sync.Mutex
	by map[string][2]*secrets.Bundle
}

func (b *syntheticBundles) get(contract string) ([2]*secrets.Bundle, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.by[contract]; ok {
		return p, nil
	}
	var p [2]*secrets.Bundle
	for i := range p {
		g, err := bundle.Generate(secrets.NewFixedClock(time.Now()), contract)
		if err != nil {
			return p, err
		}
		p[i] = g
	}
	if b.by == nil {
		b.by = map[string][2]*secrets.Bundle{}
	}
	b.by[contract] = p
	return p, nil
}

// GetEffectiveConfig implements MachineService.
func (s *MachineService) GetEffectiveConfig(ctx context.Context, req *ichorv1.GetEffectiveConfigRequest) (*ichorv1.GetEffectiveConfigResponse, error) {
	name := req.GetName()
	if name == "" {
		return nil, invalid("name is required")
	}
	what := "reading the effective configuration of machine " + name
	for _, res := range []string{resMachines, resClusters, resPatches} {
		if err := s.Clients.Authorize(ctx, "get", res); err != nil {
			return nil, apiError(ctx, err, what)
		}
	}
	if err := s.Clients.Authorize(ctx, "list", resPatches); err != nil {
		return nil, apiError(ctx, err, what)
	}
	m, err := s.cachedMachine(ctx, name)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	if m.Spec.Role == "" {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: the machine has no role until it is approved, and its configuration depends on the role", what)
	}
	// The same gathering as the controller's and the CLI's: the cluster, the
	// namespace's patches and its TalosStorages (their presets are part of
	// the system layer).
	in, err := render.LoadInput(ctx, s.Clients.Cache, m)
	if err != nil {
		return nil, apiError(ctx, err, what)
	}
	c := in.Cluster
	bundles, err := s.bundles.get(c.Spec.VersionContract)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
	}
	var results [2][]render.Entry
	var steps []render.Step
	for i, b := range bundles {
		in.Bundle = b
		r, err := render.Render(in)
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
		}
		entries, err := r.Effective()
		if err != nil {
			return nil, status.Errorf(codes.Internal, "%s: %v", what, err)
		}
		results[i] = entries
		steps = r.Steps
	}
	other := make(map[render.Path]string, len(results[1]))
	for _, e := range results[1] {
		v, err := json.Marshal(e.Value)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "%s: encoding %s: %v", what, e.Path, err)
		}
		other[e.Path] = string(v)
	}
	masked := `"` + render.RedactedReplacement + `"`
	out := &ichorv1.GetEffectiveConfigResponse{Entries: make([]*ichorv1.ConfigEntry, 0, len(results[0]))}
	for _, e := range results[0] {
		v, err := json.Marshal(e.Value)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "%s: encoding %s: %v", what, e.Path, err)
		}
		secret := string(v) == masked
		if o, ok := other[e.Path]; !ok || o != string(v) {
			secret, v = true, []byte(masked)
		}
		out.Entries = append(out.Entries, &ichorv1.ConfigEntry{
			Kind: e.Path.Kind, DocumentName: e.Path.Name, Field: e.Path.Field, ValueJson: string(v),
			OriginLayer: e.Origin.Layer, OriginPatch: e.Origin.Patch, Secret: secret,
			Privileged: privileged.Is(e.Path.MetaPath()),
		})
	}
	for _, st := range steps {
		out.Steps = append(out.Steps, &ichorv1.ConfigStep{Layer: st.Layer, Name: st.Name, Priority: st.Priority})
	}
	return out, nil
}
