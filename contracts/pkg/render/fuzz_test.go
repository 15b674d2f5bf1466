package render_test

import (
	"bytes"
	"encoding/json"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

// FuzzRenderPatchSets renders a control plane under an arbitrary set of
// TalosConfigPatches (JSON, as the API server would store them; seeded with
// the benchmark's twenty patches over every layer and subsets of them): no
// patch set panics the render, and a render that succeeds gives the same
// bytes and hash again (the hash is what drift is judged by).
func FuzzRenderPatchSets(f *testing.F) {
	base := benchInput(f)
	for _, n := range []int{0, 1, 5, len(base.Patches)} {
		b, err := json.Marshal(base.Patches[:n])
		if err != nil {
			f.Fatal(err)
		}

		f.Add(b)
	}

	f.Add([]byte(`[{"metadata":{"name":"x","namespace":"ns"},"spec":{"clusterName":"prod","layer":"cluster","documents":[{"sysctlConfig":{"params":{"a":"1"}}}]}}]`))

	f.Fuzz(func(t *testing.T, data []byte) {
		var patches []ichorv1alpha1.TalosConfigPatch
		if json.Unmarshal(data, &patches) != nil {
			return
		}

		in := benchInput(t)
		in.Patches = patches

		first, err := render.Render(in)
		if err != nil {
			return
		}

		in = benchInput(t)
		in.Patches = patches

		again, err := render.Render(in)
		if err != nil {
			t.Fatalf("the same patches rendered once and failed the second time: %v", err)
		}

		if first.Hash != again.Hash || !bytes.Equal(first.Bytes, again.Bytes) {
			t.Fatalf("the same patches rendered twice differ: %s vs %s", first.Hash, again.Hash)
		}
	})
}
