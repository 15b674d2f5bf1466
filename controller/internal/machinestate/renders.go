package machinestate

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// Renders keeps each machine's last render beside a hash of everything it
// was made from, so that a look at a machine whose inputs did not change
// does not render again. A render costs milliseconds and a megabyte of
// garbage; the drift looks at a thousand machines, every few minutes each,
// turn that into a steady share of a core for nothing.
//
// Only the bytes and their hash are kept (a few kilobytes a machine): a
// State whose render came from here has a Result with Bytes, Hash and
// MachineType, and no Config or Steps. Callers that need those use Load.
type Renders struct {
	mu   sync.Mutex
	kept map[types.UID]keptRender
}

// maxKeptRenders bounds Renders: past it, everything kept is dropped (the
// machines of a deleted cluster are not looked at again).
const maxKeptRenders = 20000

type keptRender struct {
	key    [sha256.Size]byte
	result render.Result
}

// Load is machinestate.Load with the render kept: rendered again only when
// the machine, its cluster (as render.ClusterInput has it), the namespace's
// patches or storages, the bundle
// Secret, ichor-ui's issuer, the Kubernetes pins, the inline manifests or
// the renderer's version changed.
func (r *Renders) Load(ctx context.Context, c client.Reader, apiReader client.Reader, m *ichorv1alpha1.TalosMachine) (*State, error) {
	return load(ctx, c, apiReader, m, r)
}

func (r *Renders) get(uid types.UID, key [sha256.Size]byte) *render.Result {
	r.mu.Lock()
	defer r.mu.Unlock()

	k, ok := r.kept[uid]
	if !ok || k.key != key {
		return nil
	}

	res := k.result

	return &res
}

func (r *Renders) put(uid types.UID, key [sha256.Size]byte, res *render.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()

	if r.kept == nil || len(r.kept) >= maxKeptRenders {
		r.kept = map[types.UID]keptRender{}
	}

	r.kept[uid] = keptRender{key: key, result: render.Result{Bytes: res.Bytes, Hash: res.Hash, MachineType: res.MachineType}}
}

// inputKey hashes a render's input: the cluster as far as the render reads
// it (render.ClusterInput: not its status, which moves with every discovery
// scan), every other object whole (a change anywhere in one, status
// included, is a new key; at rest nothing changes), the bundle Secret by its
// version, and render.Version.
func inputKey(in render.Input, secret string) ([sha256.Size]byte, error) {
	h := sha256.New()
	enc := json.NewEncoder(h)

	for _, v := range []any{render.Version, secret, render.ClusterInput(in.Cluster), in.Machine, in.Patches, in.Storages, in.Issuer, in.Kubernetes, in.InlineManifests} {
		if err := enc.Encode(v); err != nil {
			return [sha256.Size]byte{}, fmt.Errorf("hashing the render's input: %w", err)
		}
	}

	var key [sha256.Size]byte

	h.Sum(key[:0])

	return key, nil
}
