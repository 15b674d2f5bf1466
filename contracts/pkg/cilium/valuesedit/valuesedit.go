// Package valuesedit is the one reading and preview of a change to a
// cluster's layer of Cilium values (spec.cni.cilium.values) that the ichor
// CLI (`ichor cni values get|diff|set|edit`) and ichor-ui (the Cilium page)
// share: it parses and validates a proposed layer with the webhook's own
// check (guard.CheckCiliumValues, so a refusal reads the same everywhere),
// layers the effective values (ciliumvalues.Effective), renders the chart
// before and after with the cluster's Kubernetes version, tunnel and
// kube-proxy mode (cilium.Render, offline), and diffs the rendered objects.
// The write itself is clusterreq.SetCiliumValues.
package valuesedit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// Refused is a proposed layer the shared check refuses: nothing may be
// written. The refusals are the admission webhook's own.
type Refused struct {
	// Refusals name the field, the rule and the way out.
	Refusals []guard.Refusal
}

func (e *Refused) Error() string {
	lines := make([]string, 0, len(e.Refusals))
	for _, r := range e.Refusals {
		lines = append(lines, r.Error())
	}
	return strings.Join(lines, "; ")
}

// ErrUnmanaged is the error of a cluster whose CNI Ichor does not manage.
var ErrUnmanaged = errors.New("the cluster's CNI preset is unmanaged: Ichor does not install or configure its CNI, so it has no Cilium values")

// View is a cluster's Cilium values as they are now.
type View struct {
	// Version is the chart version the values apply to: the Cilium the
	// cluster runs (status.cni.ciliumVersion), else the one Ichor installs.
	Version string
	// UserYAML is the user's layer (spec.cni.cilium.values) as YAML; "{}\n" when empty.
	UserYAML string
	// EffectiveYAML is Ichor's defaults, the user's layer and the
	// Ichor-owned keys, merged, as YAML (before the chart's own defaults).
	EffectiveYAML string
	// EffectiveHash is the hash of the effective values, as status.cni.valuesHash records it once applied.
	EffectiveHash string
	// AppliedHash is status.cni.valuesHash: the hash of the values last applied.
	AppliedHash string
	// Applied is true when the effective values are the ones last applied.
	Applied bool
}

// Preview is what a proposed layer would change.
type Preview struct {
	// Version is the chart version both renders used.
	Version string
	// UserYAML is the proposed layer as YAML, normalized; "{}\n" when empty.
	UserYAML string
	// UserJSON is the proposed layer as the JSON spec.cni.cilium.values
	// would hold; nil for an empty layer (the field is removed).
	UserJSON []byte
	// EffectiveYAML is the proposed effective values as YAML.
	EffectiveYAML string
	// Objects are the rendered objects that differ, in the order of the new render, removed ones last.
	Objects []ObjectChange
	// Diff is the unified diff of every changed object; empty when nothing changes.
	Diff string
}

// Changed says whether the proposed layer changes any rendered object.
func (p *Preview) Changed() bool { return len(p.Objects) > 0 }

// ObjectChange is one rendered object that differs.
type ObjectChange struct {
	// Object names it: Kind namespace/name (or Kind name).
	Object string `json:"object"`
	// Change is added, removed or changed.
	Change string `json:"change"`
	// Diff is its unified diff.
	Diff string `json:"diff"`
}

// The values of ObjectChange.Change.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
)

// Version is the chart version the cluster's values apply to: the Cilium
// the cluster runs (status.cni.ciliumVersion), else the one this Ichor
// installs (guard.InstalledCilium, the version the Kubernetes pair check uses).
func Version(c *ichorv1alpha1.TalosCluster) string {
	v, _ := guard.InstalledCilium(c)
	return v
}

// Nodes is the Node count the values assume: the cluster's approved
// control planes and workers (the controller counts the Nodes themselves).
func Nodes(c *ichorv1alpha1.TalosCluster) int {
	return int(c.Status.ControlPlanes.Approved + c.Status.Workers.Approved)
}

// Choices are the cluster's settings that steer the Ichor-owned values.
func Choices(c *ichorv1alpha1.TalosCluster, nodes int) ciliumvalues.Choices {
	return ciliumvalues.Choices{Tunnel: c.Spec.CNI.Tunnel, KubeProxy: c.Spec.CNI.KubeProxy, Nodes: nodes}
}

// UserLayer is the cluster's stored layer, parsed; an empty map when unset.
func UserLayer(c *ichorv1alpha1.TalosCluster) (map[string]any, error) {
	if c.Spec.CNI.Cilium == nil || c.Spec.CNI.Cilium.Values == nil {
		return map[string]any{}, nil
	}
	m, err := ciliumvalues.Parse(c.Spec.CNI.Cilium.Values.Raw)
	if err != nil {
		return nil, fmt.Errorf("the stored spec.cni.cilium.values of TalosCluster %s: %w", c.Name, err)
	}
	return m, nil
}

// Show reads the cluster's values: its layer and the effective values.
func Show(c *ichorv1alpha1.TalosCluster, nodes int) (*View, error) {
	if c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetUnmanaged {
		return nil, ErrUnmanaged
	}
	user, err := UserLayer(c)
	if err != nil {
		return nil, err
	}
	eff, err := ciliumvalues.Effective(user, Choices(c, nodes))
	if err != nil {
		return nil, fmt.Errorf("the stored Cilium values of TalosCluster %s cannot be used: %w", c.Name, err)
	}
	v := &View{Version: Version(c), AppliedHash: c.Status.CNI.ValuesHash, EffectiveHash: cilium.ValuesSHA256(eff)}
	v.Applied = v.AppliedHash == v.EffectiveHash
	if v.UserYAML, err = toYAML(user); err != nil {
		return nil, err
	}
	if v.EffectiveYAML, err = toYAML(eff); err != nil {
		return nil, err
	}
	return v, nil
}

// Parse reads a proposed layer (YAML or JSON) and runs the webhook's check
// on it. A layer that is not a map, or sets an Ichor-owned key, is a
// *Refused naming the keys and the way out.
func Parse(proposed []byte) (map[string]any, error) {
	user, err := ciliumvalues.Parse(proposed)
	if err != nil {
		return nil, &Refused{Refusals: []guard.Refusal{{
			Field: "spec.cni.cilium.values", Rule: err.Error(),
			WayOut: "write the values as a YAML or JSON map of Helm values, for example `hubble: {enabled: true}`",
		}}}
	}
	js, err := json.Marshal(user)
	if err != nil {
		return nil, err
	}
	if rf := guard.CheckCiliumValues(&runtime.RawExtension{Raw: js}); len(rf) > 0 {
		for i := range rf {
			if strings.Contains(rf[i].Rule, "Ichor-owned") {
				rf[i].WayOut += "; Ichor owns " + strings.Join(ciliumvalues.OwnedKeys(), ", ")
			}
		}
		return nil, &Refused{Refusals: rf}
	}
	return user, nil
}

// Compute previews replacing the cluster's layer with proposed: it checks
// it (a *Refused when the webhook would refuse it), layers the effective
// values before and after, renders the chart both times and diffs the
// rendered objects. nodes is the Node count (Nodes; 0 is one node).
func Compute(ctx context.Context, c *ichorv1alpha1.TalosCluster, proposed []byte, nodes int) (*Preview, error) {
	if c.Spec.CNI.Preset == ichorv1alpha1.CNIPresetUnmanaged {
		return nil, ErrUnmanaged
	}
	next, err := Parse(proposed)
	if err != nil {
		return nil, err
	}
	cur, err := UserLayer(c)
	if err != nil {
		return nil, err
	}
	opts := cilium.Options{Version: Version(c), KubernetesVersion: c.Spec.KubernetesVersion, Choices: Choices(c, nodes)}
	before, after := opts, opts
	before.UserValues, after.UserValues = cur, next
	rb, err := cilium.Render(ctx, before)
	if err != nil {
		return nil, fmt.Errorf("rendering Cilium %s with the stored values: %w", opts.Version, err)
	}
	ra, err := cilium.Render(ctx, after)
	if err != nil {
		return nil, fmt.Errorf("rendering Cilium %s with the proposed values: %w", opts.Version, err)
	}
	p := &Preview{Version: ra.Version}
	if len(next) > 0 {
		if p.UserJSON, err = json.Marshal(next); err != nil {
			return nil, err
		}
	}
	if p.UserYAML, err = toYAML(next); err != nil {
		return nil, err
	}
	if p.EffectiveYAML, err = toYAML(ra.Values); err != nil {
		return nil, err
	}
	p.Objects, err = DiffManifests(rb.Manifest, ra.Manifest)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, o := range p.Objects {
		b.WriteString(o.Diff)
	}
	p.Diff = b.String()
	return p, nil
}

// docSep splits a multi-document YAML stream.
var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

type object struct {
	key  string
	text string
}

// DiffManifests diffs two multi-document manifests object by object (by
// kind, namespace and name). The data of a Secret is never shown: each value
// becomes a digest, so a change still shows without the secret.
func DiffManifests(before, after string) ([]ObjectChange, error) {
	a, err := splitObjects(before)
	if err != nil {
		return nil, err
	}
	b, err := splitObjects(after)
	if err != nil {
		return nil, err
	}
	old := map[string]string{}
	for _, o := range a {
		old[o.key] = o.text
	}
	seen := map[string]bool{}
	var out []ObjectChange
	for _, o := range b {
		seen[o.key] = true
		prev, ok := old[o.key]
		switch {
		case !ok:
			out = append(out, change(o.key, Added, "", o.text))
		case prev != o.text:
			out = append(out, change(o.key, Changed, prev, o.text))
		}
	}
	for _, o := range a {
		if !seen[o.key] {
			out = append(out, change(o.key, Removed, o.text, ""))
		}
	}
	return out, nil
}

func change(key, kind, a, b string) ObjectChange {
	from, to := "a/"+key, "b/"+key
	switch kind {
	case Added:
		from = "/dev/null"
	case Removed:
		to = "/dev/null"
	}
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(a), B: difflib.SplitLines(b), FromFile: from, ToFile: to, Context: 3,
	})
	if err != nil {
		text = fmt.Sprintf("(the diff of %s failed: %v)\n", key, err)
	}
	return ObjectChange{Object: key, Change: kind, Diff: text}
}

func splitObjects(manifest string) ([]object, error) {
	var out []object
	for _, doc := range docSep.Split(manifest, -1) {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return nil, fmt.Errorf("reading a rendered object: %w", err)
		}
		if head.Kind == "" {
			continue
		}
		key := head.Kind + " " + head.Metadata.Name
		if head.Metadata.Namespace != "" {
			key = head.Kind + " " + head.Metadata.Namespace + "/" + head.Metadata.Name
		}
		text := strings.TrimLeft(doc, "\n")
		if head.Kind == "Secret" {
			var err error
			if text, err = redactSecret(doc); err != nil {
				return nil, err
			}
		}
		out = append(out, object{key: key, text: text})
	}
	return out, nil
}

// redactSecret replaces each value of a Secret's data and stringData by its digest.
func redactSecret(doc string) (string, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		return "", fmt.Errorf("reading a rendered Secret: %w", err)
	}
	for _, field := range []string{"data", "stringData"} {
		d, ok := m[field].(map[string]any)
		if !ok {
			continue
		}
		for k, v := range d {
			sum := sha256.Sum256(fmt.Append(nil, v))
			d[k] = "(hidden; sha256 " + hex.EncodeToString(sum[:8]) + ")"
		}
	}
	b, err := yaml.Marshal(m)
	return string(b), err
}

func toYAML(m map[string]any) (string, error) {
	if len(m) == 0 {
		return "{}\n", nil
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
