package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/privileged"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

func configCommand() *cli.Command {
	roleFlag := &cli.StringFlag{Name: flagRole, Usage: "render a pending machine as `ROLE` (controlplane or worker) for a preview; nothing is written"}
	return &cli.Command{
		Name:   "config",
		Usage:  "show a machine's effective configuration and what a patch would change; roll out waiting changes",
		Action: unknownSubcommand,
		Commands: []*cli.Command{
			{
				Name:          "effective",
				Usage:         "the effective configuration of a machine, each value with the layer and patch that set it; secrets masked",
				ArgsUsage:     argMachine,
				ShellComplete: completeMachines,
				Flags: []cli.Flag{
					roleFlag,
					&cli.StringFlag{Name: "layer", Usage: "only the values set by `LAYER` (base, system, cluster, role, selector, machine)"},
				},
				Action: configEffective,
			},
			{
				Name: "diff",
				Usage: "compare a machine's render now with what the controller rendered and applied; " +
					"with --with, what a TalosConfigPatch file would change: value by value on MACHINE, " +
					"or without MACHINE the impact on every machine (changed paths, apply mode, config rollout)",
				ArgsUsage:     "[" + argMachine + "]",
				ShellComplete: completeMachines,
				Flags: []cli.Flag{
					roleFlag,
					&cli.StringFlag{Name: "with", Usage: "`FILE` of TalosConfigPatch manifests to compare with (each replaces the patch of its name, or is added)", TakesFile: true},
				},
				Action: configDiff,
			},
			configApplyCommand(),
		},
	}
}

// renderInputs reads what a render of the machine needs: its cluster, the
// cluster's secrets bundle and the namespace's patches and TalosStorages.
func (r *run) renderInputs(ctx context.Context, cmd *cli.Command, name string) (render.Input, error) {
	m, err := r.getMachine(ctx, name)
	if err != nil {
		return render.Input{}, err
	}
	if role := cmd.String(flagRole); role != "" {
		if role != ichorv1alpha1.RoleControlPlane && role != ichorv1alpha1.RoleWorker {
			return render.Input{}, fmt.Errorf("--role %q: use controlplane or worker", role)
		}
		if m.Spec.Role != "" && m.Spec.Role != role {
			return render.Input{}, fmt.Errorf("machine %s already has the role %s; drop --role", name, m.Spec.Role)
		}
		m.Spec.Role = role
	}
	if m.Spec.Role == "" {
		return render.Input{}, fmt.Errorf("machine %s has no role yet, so it has no configuration: approve it first (`ichor machine approve %s --role ...`), "+
			"or preview with --role controlplane|worker", name, name)
	}
	c, err := r.getCluster(ctx, m.Spec.ClusterName)
	if err != nil {
		return render.Input{}, err
	}
	ref := c.Spec.SecretsBundleRef
	secret := &corev1.Secret{}
	if err := r.c().Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return render.Input{}, fmt.Errorf("the secrets bundle Secret %s/%s that TalosCluster %s references (spec.secretsBundleRef) does not exist; "+
				"restore it from ~/.ichor/clusters/%s/secrets.yaml.age", c.Namespace, ref.Name, c.Name, c.Name)
		}
		return render.Input{}, r.conn.Explain(err, fmt.Sprintf("reading the secrets bundle Secret %s/%s (rendering needs it)", c.Namespace, ref.Name))
	}
	// A rotation's accepted CAs and keys are part of the render, as the controller's.
	trust, err := bundle.LoadTrust(secret, c)
	if err != nil {
		return render.Input{}, err
	}
	// The same gathering as the controller's and ichor-ui's.
	in, err := render.LoadInput(ctx, r.c(), m)
	if err != nil {
		return render.Input{}, r.conn.Explain(err, "reading the render input (the cluster, its TalosConfigPatches and TalosStorages)")
	}
	in.Bundle, in.Accepted, in.Keys = trust.Bundle, trust.Accepted, trust.Keys
	return in, nil
}

// effectiveEntry is one value as -o yaml|json prints it.
type effectiveEntry struct {
	Path  string `json:"path"`
	Value any    `json:"value"`
	Layer string `json:"layer"`
	Patch string `json:"patch,omitempty"`
	// Privileged marks a value of contracts/pkg/privileged: it runs code as
	// root on the node or acts as cluster-admin.
	Privileged bool `json:"privileged,omitempty"`
}

func effective(res *render.Result) ([]effectiveEntry, error) {
	entries, err := res.Effective()
	if err != nil {
		return nil, fmt.Errorf("computing the effective configuration: %w", err)
	}
	out := make([]effectiveEntry, 0, len(entries))
	for _, e := range entries {
		out = append(out, effectiveEntry{Path: e.Path.String(), Value: e.Value, Layer: e.Origin.Layer, Patch: e.Origin.Patch,
			Privileged: privileged.Is(e.Path.MetaPath())})
	}
	return out, nil
}

func origin(e effectiveEntry) string {
	if e.Patch == "" {
		return e.Layer
	}
	return e.Layer + " (" + e.Patch + ")"
}

// maxValueWidth cuts long values in the table; -o yaml|json prints them whole.
const maxValueWidth = 80

func formatValue(v any, cut bool) string {
	var s string
	switch x := v.(type) {
	case nil:
		s = "null"
	case string:
		s = x
		if strings.ContainsAny(s, "\n\t") {
			s = strconv.Quote(s)
		}
	default:
		b, err := json.Marshal(x)
		if err != nil {
			s = fmt.Sprint(x)
		} else {
			s = string(b)
		}
	}
	if s == "" {
		s = `""`
	}
	if cut && len([]rune(s)) > maxValueWidth {
		s = string([]rune(s)[:maxValueWidth-1]) + "…"
	}
	return s
}

func configEffective(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one MACHINE"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	in, err := r.renderInputs(ctx, cmd, cmd.Args().First())
	if err != nil {
		return err
	}
	res, err := render.Render(in)
	if err != nil {
		return fmt.Errorf("rendering the configuration of %s: %w", in.Machine.Name, err)
	}
	entries, err := effective(res)
	if err != nil {
		return err
	}
	if layer := cmd.String("layer"); layer != "" {
		kept := entries[:0]
		for _, e := range entries {
			if e.Layer == layer {
				kept = append(kept, e)
			}
		}
		entries = kept
	}
	if r.format != output.Table {
		return output.Object(r.out, r.format, struct {
			Machine string           `json:"machine"`
			Role    string           `json:"role"`
			Hash    string           `json:"hash"`
			Values  []effectiveEntry `json:"values"`
		}{in.Machine.Name, in.Machine.Spec.Role, res.Hash, entries})
	}
	r.printf("Machine %s (%s) of cluster %s, secrets masked; long values are cut (-o yaml shows them whole).\n\n",
		in.Machine.Name, in.Machine.Spec.Role, in.Cluster.Name)
	t := &output.Rows{Header: []string{"PATH", "VALUE", "FROM", "PRIVILEGED"}}
	marked := false
	for _, e := range entries {
		priv := ""
		if e.Privileged {
			priv, marked = wordYes, true
		}
		t.Add(e.Path, formatValue(e.Value, true), origin(e), priv)
	}
	if err := t.Write(r.out); err != nil {
		return err
	}
	if marked {
		r.printf("\n%s\n", privilegedNote)
	}
	return nil
}

// privilegedNote explains the PRIVILEGED column.
var privilegedNote = "PRIVILEGED values run code as root on the node or act as cluster-admin; a TalosConfigPatch that sets one needs " +
	guard.PrivilegedPatchPermission("", "").String() + " (the ichor-admin role holds it)."

// change is one difference between two effective configurations.
type change struct {
	Change string `json:"change"`
	Path   string `json:"path"`
	Before any    `json:"before,omitempty"`
	After  any    `json:"after,omitempty"`
	From   string `json:"from,omitempty"`
}

func diffEntries(before, after []effectiveEntry) []change {
	b := make(map[string]effectiveEntry, len(before))
	for _, e := range before {
		b[e.Path] = e
	}
	seen := map[string]bool{}
	var out []change
	for _, e := range after {
		seen[e.Path] = true
		old, ok := b[e.Path]
		switch {
		case !ok:
			out = append(out, change{Change: "added", Path: e.Path, After: e.Value, From: origin(e)})
		case !reflect.DeepEqual(old.Value, e.Value):
			out = append(out, change{Change: "changed", Path: e.Path, Before: old.Value, After: e.Value, From: origin(e)})
		case origin(old) != origin(e):
			out = append(out, change{Change: "moved", Path: e.Path, Before: e.Value, After: e.Value, From: origin(old) + " -> " + origin(e)})
		}
	}
	for _, e := range before {
		if !seen[e.Path] {
			out = append(out, change{Change: "removed", Path: e.Path, Before: e.Value, From: origin(e)})
		}
	}
	return out
}

// readPatches reads the TalosConfigPatch manifests of a file.
func readPatches(path, namespace string) ([]ichorv1alpha1.TalosConfigPatch, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("--with: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []ichorv1alpha1.TalosConfigPatch
	for i := 1; ; i++ {
		var p ichorv1alpha1.TalosConfigPatch
		if err := dec.Decode(&p); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("--with %s: document %d is not a TalosConfigPatch: %w", path, i, err)
		}
		if p.Kind == "" && p.Name == "" {
			continue
		}
		if p.Kind != "TalosConfigPatch" {
			return nil, fmt.Errorf("--with %s: document %d is a %q; only TalosConfigPatch manifests are compared", path, i, p.Kind)
		}
		if p.Name == "" {
			return nil, fmt.Errorf("--with %s: document %d has no metadata.name", path, i)
		}
		if p.Namespace == "" {
			p.Namespace = namespace
		}
		if p.Namespace != namespace {
			return nil, fmt.Errorf("--with %s: TalosConfigPatch %s is in namespace %s, the machine in %s", path, p.Name, p.Namespace, namespace)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--with %s holds no TalosConfigPatch", path)
	}
	return out, nil
}

func configDiff(ctx context.Context, cmd *cli.Command) error {
	if !cmd.Args().Present() && cmd.String("with") != "" {
		return impactDiff(ctx, cmd)
	}
	if err := requireOneArg(cmd, "one MACHINE, or --with FILE alone for the impact on every machine"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	in, err := r.renderInputs(ctx, cmd, cmd.Args().First())
	if err != nil {
		return err
	}
	res, err := render.Render(in)
	if err != nil {
		return fmt.Errorf("rendering the configuration of %s: %w", in.Machine.Name, err)
	}
	if cmd.String("with") == "" {
		return r.statusDiff(in.Machine, res)
	}
	proposed, err := readPatches(cmd.String("with"), in.Machine.Namespace)
	if err != nil {
		return err
	}
	after := in
	after.Patches = mergePatches(in.Patches, proposed)
	res2, err := render.Render(after)
	if err != nil {
		return fmt.Errorf("rendering %s with %s: %w", in.Machine.Name, cmd.String("with"), err)
	}
	before, err := effective(res)
	if err != nil {
		return err
	}
	now, err := effective(res2)
	if err != nil {
		return err
	}
	changes := diffEntries(before, now)
	gated := privilegedWrites(in.Patches, proposed)
	if r.format != output.Table {
		return output.Object(r.out, r.format, struct {
			Machine    string          `json:"machine"`
			HashBefore string          `json:"hashBefore"`
			HashAfter  string          `json:"hashAfter"`
			Changes    []change        `json:"changes"`
			Privileged []privilegedRow `json:"privilegedWrites,omitempty"`
		}{in.Machine.Name, res.Hash, res2.Hash, changes, gated})
	}
	defer r.writePrivilegedWrites(gated)
	if len(changes) == 0 {
		r.printf("%s changes nothing in the effective configuration of %s.\n", cmd.String("with"), in.Machine.Name)
		return nil
	}
	r.printf("%s changes %d value(s) of %s (secrets masked):\n\n", cmd.String("with"), len(changes), in.Machine.Name)
	t := &output.Rows{Header: []string{"CHANGE", "PATH", "BEFORE", "AFTER", "FROM"}}
	for _, c := range changes {
		before, after := "", ""
		if c.Change != "added" {
			before = formatValue(c.Before, true)
		}
		if c.Change != "removed" {
			after = formatValue(c.After, true)
		}
		t.Add(c.Change, c.Path, before, after, c.From)
	}
	return t.Write(r.out)
}

// privilegedRow is a write of a proposed patch that needs the privileged verb.
type privilegedRow struct {
	Patch      string `json:"patch"`
	Field      string `json:"field"`
	Permission string `json:"permission"`
	Action     string `json:"action"`
}

// privilegedWrites returns, for each proposed patch, what the admission
// webhook would require to write it over the current patch of its name: the
// same guard.PatchRequirements.
func privilegedWrites(current, proposed []ichorv1alpha1.TalosConfigPatch) []privilegedRow {
	byName := make(map[string]*ichorv1alpha1.TalosConfigPatch, len(current))
	for i := range current {
		byName[current[i].Name] = &current[i]
	}
	var out []privilegedRow
	for i := range proposed {
		for _, req := range guard.PatchRequirements(byName[proposed[i].Name], &proposed[i]) {
			out = append(out, privilegedRow{Patch: proposed[i].Name, Field: req.Field, Permission: req.Permission.String(),
				Action: req.Action})
		}
	}
	return out
}

// writePrivilegedWrites says which proposed patches need the privileged verb.
func (r *run) writePrivilegedWrites(rows []privilegedRow) {
	for _, p := range rows {
		r.printf("\nPrivileged: %s needs %s (the ichor-admin role holds it) at %s.\n", p.Action, p.Permission, p.Field)
	}
}

// mergePatches replaces the patches of the same name and adds the others.
func mergePatches(current, proposed []ichorv1alpha1.TalosConfigPatch) []ichorv1alpha1.TalosConfigPatch {
	out := make([]ichorv1alpha1.TalosConfigPatch, 0, len(current)+len(proposed))
	replaced := map[string]bool{}
	for _, p := range proposed {
		replaced[p.Name] = true
	}
	for _, p := range current {
		if !replaced[p.Name] {
			out = append(out, p)
		}
	}
	return append(out, proposed...)
}

// statusDiff compares the render of now with the hashes the controller recorded.
func (r *run) statusDiff(m *ichorv1alpha1.TalosMachine, res *render.Result) error {
	st := m.Status
	type report struct {
		Machine      string   `json:"machine"`
		RenderedNow  string   `json:"renderedNow"`
		Rendered     string   `json:"rendered,omitempty"`
		Applied      string   `json:"applied,omitempty"`
		UpToDate     bool     `json:"upToDate"`
		Applies      bool     `json:"appliedMatches"`
		DriftPaths   []string `json:"driftPaths,omitempty"`
		RebootPaths  []string `json:"rebootRequiredPaths,omitempty"`
		RenderVerNow int      `json:"renderVersion"`
	}
	rep := report{Machine: m.Name, RenderedNow: res.Hash, Rendered: st.RenderedConfigHash, Applied: st.AppliedConfigHash,
		UpToDate: st.RenderedConfigHash == res.Hash, Applies: st.AppliedConfigHash == res.Hash,
		DriftPaths: st.DriftPaths, RebootPaths: st.RebootRequiredPaths, RenderVerNow: render.Version}
	if r.format != output.Table {
		return output.Object(r.out, r.format, rep)
	}
	b := &output.Block{}
	b.Add("Rendered now", res.Hash)
	switch {
	case st.RenderedConfigHash == "":
		b.Add("Controller rendered", "nothing yet")
	case rep.UpToDate:
		b.Add("Controller rendered", "the same")
	default:
		b.Add("Controller rendered", st.RenderedConfigHash+" (differs: the controller has not rendered the current inputs yet, or renders another version)")
	}
	switch {
	case st.AppliedConfigHash == "":
		b.Add("Applied to the node", "nothing yet")
	case rep.Applies:
		b.Add("Applied to the node", "the same")
	default:
		b.Add("Applied to the node", st.AppliedConfigHash+" (differs: the node runs an earlier configuration)")
	}
	b.Add("Drifted paths", strings.Join(st.DriftPaths, ", "))
	b.Add("Waiting for a reboot", strings.Join(st.RebootRequiredPaths, ", "))
	if err := b.Write(r.out); err != nil {
		return err
	}
	r.printf("\nThe configuration itself is never stored, so only hashes can be compared; " +
		"`ichor config diff MACHINE --with FILE` shows what a patch would change value by value.\n")
	return nil
}
