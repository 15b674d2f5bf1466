package render_test

import (
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

const inlineCM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: boot\n  namespace: kube-system\n"

func TestInlineManifestOnControlPlane(t *testing.T) {
	in := input(t)
	in.InlineManifests = []render.InlineManifest{{Name: "cilium", Contents: inlineCM}}
	r := renderOK(t, in)

	got := r.Config.K8sInlineManifestConfigs()
	if len(got) != 1 || got[0].Name() != "cilium" || !strings.Contains(got[0].Contents(), "name: boot") {
		t.Fatalf("inline manifests = %+v, want the one cilium entry", got)
	}

	if warnings, err := r.Validate(); err != nil {
		t.Fatalf("the config with an inline manifest does not validate: %v (%v)", err, warnings)
	}

	last := r.Steps[len(r.Steps)-1]
	found := false

	for _, s := range r.Steps {
		if s.Name == render.PatchInlineManifests && s.Layer == render.LayerSystem {
			found = true
		}
	}

	if !found {
		t.Fatalf("no %s step in the system layer; last step %+v", render.PatchInlineManifests, last)
	}

	// Without the input the same machine has none: the controller's render.
	if n := len(renderOK(t, input(t)).Config.K8sInlineManifestConfigs()); n != 0 {
		t.Fatalf("a render without inline manifests has %d", n)
	}
}

func TestInlineManifestNotOnWorker(t *testing.T) {
	in := input(t)
	in.Machine = machine("w-1", ichorv1alpha1.RoleWorker)
	in.InlineManifests = []render.InlineManifest{{Name: "cilium", Contents: inlineCM}}

	if n := len(renderOK(t, in).Config.K8sInlineManifestConfigs()); n != 0 {
		t.Fatalf("a worker got %d inline manifests", n)
	}
}

func TestInlineManifestBadName(t *testing.T) {
	for _, ims := range [][]render.InlineManifest{
		{{Name: "Not A Label", Contents: inlineCM}},
		{{Name: "cilium", Contents: inlineCM}, {Name: "cilium", Contents: inlineCM}},
	} {
		in := input(t)
		in.InlineManifests = ims

		if _, err := render.Render(in); err == nil || !strings.Contains(err.Error(), "inline manifest") {
			t.Fatalf("Render(%v) error = %v, want an inline manifest refusal", ims, err)
		}
	}
}
