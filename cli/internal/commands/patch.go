package commands

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/urfave/cli/v3"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/maeshinshin/ichor/cli/internal/output"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/plan"
	"github.com/maeshinshin/ichor/contracts/pkg/privileged"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
)

const (
	argPatch     = "PATCH"
	flagFromFile = "from-file"
	flagMachine  = "machine"
	colCluster   = "CLUSTER"
	kindPatch    = "TalosConfigPatch"
)

// strictFields asks the API server to refuse an unknown field instead of
// pruning it (architecture, "Typed configuration").
var strictFields = client.FieldValidation("Strict")

// patchCommand is `ichor patch`: the cluster's TalosConfigPatches, each
// write previewed (plan.Preview, as the console's) and made as the user.
func patchCommand() *cli.Command {
	target := []cli.Flag{
		&cli.StringFlag{Name: "layer", Usage: "`LAYER`: cluster, role, selector or machine"},
		&cli.IntFlag{Name: "priority", Usage: "`N` orders patches within a layer (-1000..1000); higher applies later"},
		&cli.StringFlag{Name: flagRole, Usage: "the `ROLE` of the role layer: controlplane or worker"},
		&cli.StringFlag{Name: "selector", Aliases: []string{"l"}, Usage: "the TalosMachine label `SELECTOR` of the selector layer (as kubectl -l)"},
		&cli.StringFlag{Name: flagMachine, Usage: "the TalosMachine `NAME` of the machine layer"},
		&cli.StringSliceFlag{Name: "sysctl", Usage: "set the kernel parameter `KEY=VALUE` (a SysctlConfig document; repeatable)"},
		&cli.StringSliceFlag{Name: "sysfs", Usage: "set the sysfs attribute `KEY=VALUE` (a SysfsConfig document; repeatable)"},
		&cli.StringSliceFlag{Name: "kernel-module", Usage: "load the kernel module `NAME` (a KernelModuleConfig document; repeatable)"},
		&cli.StringFlag{Name: flagFromFile, Usage: "`FILE` holding a TalosConfigPatch manifest (typed documents; - reads standard input)", TakesFile: true},
		&cli.StringFlag{Name: flagCluster, Usage: usageCluster},
	}
	return &cli.Command{
		Name:   "patch",
		Usage:  "list, show, create, edit and delete TalosConfigPatches; every write shows its impact on each machine first",
		Action: unknownSubcommand,
		Commands: []*cli.Command{
			{
				Name:   cmdList,
				Usage:  "the patches by layer (cluster, role, selector, machine) and priority, with their target and documents",
				Flags:  []cli.Flag{&cli.StringFlag{Name: flagCluster, Usage: "only the patches of TalosCluster `NAME`"}},
				Action: patchList,
			},
			{
				Name: cmdGet, Usage: "one patch: its layer, target and typed documents", ArgsUsage: argPatch,
				Action: patchGet,
			},
			{
				Name: "create", ArgsUsage: argPatch, Flags: target, Action: patchCreate,
				Usage: "create a patch from typed flags (--sysctl, --sysfs, --kernel-module) or --from-file; " +
					"prints the impact on each machine and asks before writing",
			},
			{
				Name: "edit", ArgsUsage: argPatch, Action: patchEdit,
				Usage: "edit a patch's typed document in $EDITOR; it is checked on save (schema, machinery validation), " +
					"its impact is shown, and you are asked before it is written",
			},
			{
				Name: "delete", ArgsUsage: argPatch, Action: patchDelete,
				Usage: "delete a patch; prints the impact on each machine and asks first",
			},
		},
	}
}

var layerRank = map[string]int{
	ichorv1alpha1.LayerCluster: 0, ichorv1alpha1.LayerRole: 1, ichorv1alpha1.LayerSelector: 2, ichorv1alpha1.LayerMachine: 3,
}

// sortPatches orders patches as they apply: by layer, priority, name.
func sortPatches(ps []ichorv1alpha1.TalosConfigPatch) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if layerRank[a.Spec.Layer] != layerRank[b.Spec.Layer] {
			return layerRank[a.Spec.Layer] < layerRank[b.Spec.Layer]
		}
		if a.Spec.Priority != b.Spec.Priority {
			return a.Spec.Priority < b.Spec.Priority
		}
		return a.Name < b.Name
	})
}

// targetOf is the patch's target as people read it.
func targetOf(p *ichorv1alpha1.TalosConfigPatch) string {
	t := p.Spec.Target
	switch p.Spec.Layer {
	case ichorv1alpha1.LayerRole:
		return "role=" + t.Role
	case ichorv1alpha1.LayerSelector:
		if t.Selector == nil {
			return "(no selector)"
		}
		return metav1.FormatLabelSelector(t.Selector)
	case ichorv1alpha1.LayerMachine:
		return "machine=" + t.MachineName
	default:
		return "every machine"
	}
}

// documentKinds names the patch's documents: SysctlConfig, VLANConfig/eth0.10.
func documentKinds(p *ichorv1alpha1.TalosConfigPatch) string {
	out := make([]string, 0, len(p.Spec.Documents))
	for i := range p.Spec.Documents {
		kind, _, ok := p.Spec.Documents[i].Document()
		if !ok {
			kind = "?"
		}
		out = append(out, kind)
	}
	return strings.Join(out, ", ")
}

func patchList(ctx context.Context, cmd *cli.Command) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	list := &ichorv1alpha1.TalosConfigPatchList{}
	if err := r.c().List(ctx, list, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosConfigPatches in namespace "+r.ns())
	}
	items := list.Items[:0]
	for _, p := range list.Items {
		if c := cmd.String(flagCluster); c == "" || p.Spec.ClusterName == c {
			items = append(items, p)
		}
	}
	sortPatches(items)
	if r.format != output.Table {
		for i := range items {
			clean(&items[i])
		}
		return output.Object(r.out, r.format, items)
	}
	if len(items) == 0 {
		r.printf("No TalosConfigPatch in namespace %s; create one with `ichor patch create NAME --layer cluster --sysctl KEY=VALUE`.\n", r.ns())
		return nil
	}
	machines := &ichorv1alpha1.TalosMachineList{}
	if err := r.c().List(ctx, machines, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosMachines in namespace "+r.ns())
	}
	t := &output.Rows{Header: []string{colName, colCluster, "LAYER", "PRIORITY", "TARGET", "DOCUMENTS", "MACHINES", "PRIVILEGED"}}
	marked := false
	for i := range items {
		p := &items[i]
		priv := ""
		if len(privileged.InPatch(p)) > 0 {
			priv, marked = wordYes, true
		}
		t.Add(p.Name, p.Spec.ClusterName, p.Spec.Layer, fmt.Sprint(p.Spec.Priority), targetOf(p), documentKinds(p),
			fmt.Sprint(targeted(p, machines.Items)), priv)
	}
	if err := t.Write(r.out); err != nil {
		return err
	}
	if marked {
		r.printf("\n%s\n", privilegedNote)
	}
	return nil
}

// targeted counts the machines of the patch's cluster it targets now.
func targeted(p *ichorv1alpha1.TalosConfigPatch, machines []ichorv1alpha1.TalosMachine) int {
	n := 0
	for i := range machines {
		m := &machines[i]
		if m.Spec.ClusterName != p.Spec.ClusterName {
			continue
		}
		if ok, err := render.Targets(p, m); err == nil && ok {
			n++
		}
	}
	return n
}

// clean drops what a person does not write from a patch printed as data.
func clean(p *ichorv1alpha1.TalosConfigPatch) {
	p.APIVersion = ichorv1alpha1.GroupVersion.String()
	p.Kind = kindPatch
	p.ManagedFields = nil
}

func (r *run) getPatch(ctx context.Context, name string) (*ichorv1alpha1.TalosConfigPatch, error) {
	p := &ichorv1alpha1.TalosConfigPatch{}
	if err := r.c().Get(ctx, client.ObjectKey{Namespace: r.ns(), Name: name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("TalosConfigPatch %s does not exist in namespace %s; `ichor patch list` shows the patches", name, r.ns())
		}
		return nil, r.conn.Explain(err, "reading TalosConfigPatch "+name)
	}
	return p, nil
}

func patchGet(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one "+argPatch); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	p, err := r.getPatch(ctx, cmd.Args().First())
	if err != nil {
		return err
	}
	clean(p)
	if r.format != output.Table {
		return output.Object(r.out, r.format, p)
	}
	b := &output.Block{}
	b.Add("Name", p.Name)
	b.Add("Cluster", p.Spec.ClusterName)
	b.Add("Layer", p.Spec.Layer)
	b.Add("Priority", fmt.Sprint(p.Spec.Priority))
	b.Add("Target", targetOf(p))
	machines := &ichorv1alpha1.TalosMachineList{}
	if err := r.c().List(ctx, machines, client.InNamespace(r.ns())); err != nil {
		return r.conn.Explain(err, "listing TalosMachines in namespace "+r.ns())
	}
	b.Add("Machines", fmt.Sprint(targeted(p, machines.Items)))
	var paths []string
	for _, f := range privileged.InPatch(p) {
		paths = append(paths, f.String())
	}
	b.Add("Privileged", strings.Join(paths, ", "))
	if err := b.Write(r.out); err != nil {
		return err
	}
	docs, err := yaml.Marshal(p.Spec.Documents)
	if err != nil {
		return err
	}
	r.printf("\nDocuments:\n%s", indent(string(docs)))
	if len(p.Status.Conditions) > 0 {
		r.printf("\n")
		return conditionsTable(p.Status.Conditions).Write(r.out)
	}
	return nil
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = "  " + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

// decodePatch reads a TalosConfigPatch manifest strictly: a field outside
// the typed schema (a secret field, raw YAML) is refused by name.
func decodePatch(data []byte, what string) (*ichorv1alpha1.TalosConfigPatch, error) {
	p := &ichorv1alpha1.TalosConfigPatch{}
	if err := yaml.UnmarshalStrict(data, p); err != nil {
		return nil, fmt.Errorf("%s is not a typed TalosConfigPatch (secret fields and raw YAML are not part of the schema; "+
			"`kubectl explain talosconfigpatch.spec.documents` lists the fields): %w", what, err)
	}
	if p.Kind != "" && p.Kind != kindPatch {
		return nil, fmt.Errorf("%s is a %q; only a TalosConfigPatch manifest is read", what, p.Kind)
	}
	return p, nil
}

// patchFromFlags builds the patch of `create`.
func (r *run) patchFromFlags(ctx context.Context, cmd *cli.Command, name string) (*ichorv1alpha1.TalosConfigPatch, error) {
	p := &ichorv1alpha1.TalosConfigPatch{}
	if f := cmd.String(flagFromFile); f != "" {
		var data []byte
		var err error
		if f == "-" {
			data, err = io.ReadAll(r.in)
		} else {
			data, err = os.ReadFile(f)
		}
		if err != nil {
			return nil, fmt.Errorf("--from-file: %w", err)
		}
		if p, err = decodePatch(data, "--from-file "+f); err != nil {
			return nil, err
		}
		if p.Name != "" && p.Name != name {
			return nil, fmt.Errorf("--from-file %s names the patch %q, the command %q; make them the same", f, p.Name, name)
		}
		if p.Namespace != "" && p.Namespace != r.ns() {
			return nil, fmt.Errorf("--from-file %s is in namespace %s, the command works in %s (-n)", f, p.Namespace, r.ns())
		}
	}
	p.APIVersion, p.Kind = "", ""
	p.Name, p.Namespace = name, r.ns()
	s := &p.Spec
	if v := cmd.String("layer"); v != "" {
		s.Layer = v
	}
	if cmd.IsSet("priority") {
		s.Priority = int32(cmd.Int("priority")) //nolint:gosec // the CRD bounds it to ±1000
	}
	if v := cmd.String(flagRole); v != "" {
		s.Target.Role = v
	}
	if v := cmd.String("selector"); v != "" {
		sel, err := metav1.ParseToLabelSelector(v)
		if err != nil {
			return nil, fmt.Errorf("--selector %q: %w", v, err)
		}
		s.Target.Selector = sel
	}
	if v := cmd.String(flagMachine); v != "" {
		s.Target.MachineName = v
	}
	if s.Layer == "" {
		s.Layer = ichorv1alpha1.LayerCluster
	}
	kv := func(flag string) (map[string]string, error) {
		out := map[string]string{}
		for _, e := range cmd.StringSlice(flag) {
			k, v, ok := strings.Cut(e, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("--%s %q: write KEY=VALUE, for example --%s net.core.somaxconn=65535", flag, e, flag)
			}
			out[k] = v
		}
		return out, nil
	}
	sysctls, err := kv("sysctl")
	if err != nil {
		return nil, err
	}
	if len(sysctls) > 0 {
		s.Documents = append(s.Documents, mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: sysctls}})
	}
	sysfs, err := kv("sysfs")
	if err != nil {
		return nil, err
	}
	if len(sysfs) > 0 {
		s.Documents = append(s.Documents, mirror.PatchDocument{SysfsConfig: &mirror.SysfsConfig{Params: sysfs}})
	}
	for _, m := range cmd.StringSlice("kernel-module") {
		s.Documents = append(s.Documents, mirror.PatchDocument{KernelModuleConfig: &mirror.KernelModuleConfig{Name: m}})
	}
	if len(s.Documents) == 0 {
		return nil, errors.New("the patch sets nothing: give --sysctl KEY=VALUE, --sysfs KEY=VALUE, --kernel-module NAME, " +
			"or --from-file FILE with typed documents")
	}
	if want := cmd.String(flagCluster); want != "" && s.ClusterName != "" && s.ClusterName != want {
		return nil, fmt.Errorf("--cluster %s differs from the file's spec.clusterName %s; drop one of them", want, s.ClusterName)
	}
	if s.ClusterName == "" || cmd.String(flagCluster) != "" {
		c, err := r.getCluster(ctx, cmd.String(flagCluster))
		if err != nil {
			return nil, err
		}
		s.ClusterName = c.Name
	}
	return p, nil
}

// previewEdit runs plan.Preview over the cluster's machines. The secrets
// bundle is a synthetic one: both renders use it, so the changed paths and
// modes are the edit's, and a user who may not read the bundle's Secret
// (an operator) sees the same preview.
func (r *run) previewEdit(ctx context.Context, e plan.PatchEdit) (plan.Impact, error) {
	p := e.New
	if p == nil {
		p = e.Old
	}
	stub := &ichorv1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns()}}
	stub.Spec.ClusterName = p.Spec.ClusterName
	in, err := render.LoadInput(ctx, r.c(), stub)
	if err != nil {
		if errors.Is(err, render.ErrClusterNotFound) {
			return plan.Impact{}, fmt.Errorf("TalosConfigPatch %s names cluster %q (spec.clusterName), which does not exist in namespace %s; "+
				"`ichor cluster list` shows the clusters", p.Name, p.Spec.ClusterName, r.ns())
		}
		return plan.Impact{}, r.conn.Explain(err, "reading the render input (the cluster, its TalosConfigPatches and TalosStorages)")
	}
	in.Bundle, err = bundle.Generate(secrets.NewFixedClock(time.Now()), in.Cluster.Spec.VersionContract)
	if err != nil {
		return plan.Impact{}, err
	}
	list := &ichorv1alpha1.TalosMachineList{}
	if err := r.c().List(ctx, list, client.InNamespace(r.ns())); err != nil {
		return plan.Impact{}, r.conn.Explain(err, "listing TalosMachines in namespace "+r.ns())
	}
	imp, err := plan.Preview(plan.PreviewInput{Base: in, Machines: list.Items, Edit: e})
	if err != nil {
		return imp, fmt.Errorf("previewing TalosConfigPatch %s: %w", p.Name, err)
	}
	return imp, nil
}

// writeImpact prints an impact preview for people.
func writeImpact(w io.Writer, verb string, imp *plan.Impact) {
	if len(imp.Machines) == 0 {
		_, _ = fmt.Fprintf(w, "%s TalosConfigPatch %s changes no machine: it targets none that has a role yet.\n", verb, imp.Patch)
	} else {
		_, _ = fmt.Fprintf(w, "%s TalosConfigPatch %s, per machine (changed paths, never values):\n\n", verb, imp.Patch)
		t := &output.Rows{Header: []string{argMachine, colRole, "MODE", "ROLLOUT", "CHANGES"}}
		for _, m := range imp.Machines {
			rollout := ""
			if m.WaitsForRollout {
				rollout = "waits for `ichor config apply`"
			}
			mode := m.Mode
			if len(m.Errors) > 0 {
				mode = "invalid"
			}
			changes := make([]string, 0, len(m.Changes))
			for _, c := range m.Changes {
				changes = append(changes, string(c.Op)+" "+c.Path.String())
			}
			t.Add(m.Machine, m.Role, mode, rollout, strings.Join(changes, ", "))
		}
		_ = t.Write(w)
		for _, m := range imp.Machines {
			for _, e := range m.Errors {
				_, _ = fmt.Fprintf(w, "\n%s: Talos would refuse the configuration: %s", m.Machine, e)
			}
			for _, e := range m.Warnings {
				_, _ = fmt.Fprintf(w, "\n%s: warning: %s", m.Machine, e)
			}
		}
		_, _ = fmt.Fprintln(w)
	}
	for _, p := range imp.Privileged {
		_, _ = fmt.Fprintf(w, "\nPrivileged: %s needs %s (the ichor-admin role holds it) at %s.\n", p.Action, p.Permission, p.Field)
	}
}

// invalidImpact is the refusal of a write after which a machine's
// configuration would not render or validate.
func invalidImpact(imp *plan.Impact) error {
	var lines []string
	for _, m := range imp.Machines {
		for _, e := range m.Errors {
			lines = append(lines, m.Machine+": "+e)
		}
	}
	return fmt.Errorf("TalosConfigPatch %s would give machines a configuration Talos refuses, so nothing was written: %s; "+
		"correct the field named and run the command again", imp.Patch, strings.Join(lines, "; "))
}

// checkPrivileged refuses, before writing, what the admission webhook would
// refuse: privileged configuration without `update` on
// talosconfigpatches/privileged (the same guard.PatchRequirements).
func (r *run) checkPrivileged(ctx context.Context, e plan.PatchEdit) error {
	return r.checkRequirements(ctx, guard.PatchRequirements(e.Old, e.New), "write privileged configuration", "nothing was written")
}

// checkRequirements asks the API server, as the kubeconfig's user, for each
// permission the admission webhook would ask (a SelfSubjectAccessReview); the
// first refused one is the error, with what was (not) done.
func (r *run) checkRequirements(ctx context.Context, reqs []guard.Requirement, doing, nothing string) error {
	for _, req := range reqs {
		p := req.Permission
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: p.Namespace, Verb: p.Verb, Group: ichorv1alpha1.GroupVersion.Group,
				Resource: p.Resource, Subresource: p.Subresource, Name: p.Name,
			},
		}}
		if err := r.c().Create(ctx, review); err != nil {
			return r.conn.Explain(err, "checking whether you may "+doing)
		}
		if !review.Status.Allowed {
			return fmt.Errorf("%s; %s", req.Refusal("").Error(), nothing)
		}
	}
	return nil
}

// writeEdit previews, asks, checks and writes one patch edit.
func (r *run) writeEdit(ctx context.Context, verb string, e plan.PatchEdit, write func() error) error {
	imp, err := r.previewEdit(ctx, e)
	if err != nil {
		return err
	}
	human := r.out
	if r.format != output.Table {
		human = r.errOut
	}
	writeImpact(human, verb, &imp)
	if !imp.Valid() {
		return invalidImpact(&imp)
	}
	if err := r.checkPrivileged(ctx, e); err != nil {
		return err
	}
	if err := r.confirm(fmt.Sprintf("\n%s TalosConfigPatch %s.", verb, imp.Patch), imp.Patch); err != nil {
		return err
	}
	if err := write(); err != nil {
		return r.conn.Explain(err, strings.ToLower(verb)+" TalosConfigPatch "+imp.Patch)
	}
	if r.format != output.Table {
		return output.Object(r.out, r.format, imp)
	}
	r.printf("%s TalosConfigPatch %s: done.", verb, imp.Patch)
	if waits := waiting(&imp); len(waits) > 0 {
		r.printf(" %s wait for a config rollout: `ichor config apply`.", strings.Join(waits, ", "))
	}
	r.printf("\n")
	return nil
}

func waiting(imp *plan.Impact) []string {
	var out []string
	for _, m := range imp.Machines {
		if m.WaitsForRollout {
			out = append(out, m.Machine)
		}
	}
	return out
}

func patchCreate(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one "+argPatch+" (the new patch's name)"); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	p, err := r.patchFromFlags(ctx, cmd, cmd.Args().First())
	if err != nil {
		return err
	}
	if _, err := r.getPatch(ctx, p.Name); err == nil {
		return fmt.Errorf("TalosConfigPatch %s already exists; change it with `ichor patch edit %s`, or pick another name", p.Name, p.Name)
	}
	return r.writeEdit(ctx, "Creating", plan.PatchEdit{New: p}, func() error { return r.c().Create(ctx, p, strictFields) })
}

func patchDelete(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one "+argPatch); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	old, err := r.getPatch(ctx, cmd.Args().First())
	if err != nil {
		return err
	}
	rv := old.ResourceVersion
	return r.writeEdit(ctx, "Deleting", plan.PatchEdit{Old: old}, func() error {
		return r.c().Delete(ctx, old, client.Preconditions{ResourceVersion: &rv})
	})
}

// editHeader heads the file $EDITOR opens.
const editHeader = `# Edit TalosConfigPatch %s. Only spec is read: its layer, priority, target and
# typed documents (` + "`kubectl explain talosconfigpatch.spec.documents`" + ` lists them).
# Save and quit to preview the change; an unchanged or empty file cancels.
`

func patchEdit(ctx context.Context, cmd *cli.Command) error {
	if err := requireOneArg(cmd, "one "+argPatch); err != nil {
		return err
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	old, err := r.getPatch(ctx, cmd.Args().First())
	if err != nil {
		return err
	}
	doc := struct {
		APIVersion string                             `json:"apiVersion"`
		Kind       string                             `json:"kind"`
		Metadata   map[string]string                  `json:"metadata"`
		Spec       ichorv1alpha1.TalosConfigPatchSpec `json:"spec"`
	}{ichorv1alpha1.GroupVersion.String(), kindPatch, map[string]string{"name": old.Name}, old.Spec}
	body, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	text := fmt.Sprintf(editHeader, old.Name) + string(body)
	original := text
	for {
		edited, err := r.runEditor(text)
		if err != nil {
			return err
		}
		if strings.TrimSpace(stripComments(edited)) == "" || stripComments(edited) == stripComments(original) {
			return fmt.Errorf("edit cancelled: the file was left unchanged or empty; TalosConfigPatch %s was not changed", old.Name)
		}
		updated, problem := r.checkEdited(ctx, old, edited)
		if problem == nil {
			rv := old.ResourceVersion
			updated.ResourceVersion = rv
			return r.writeEdit(ctx, "Changing", plan.PatchEdit{Old: old, New: updated},
				func() error { return r.c().Update(ctx, updated, strictFields) })
		}
		if stripComments(edited) == stripComments(text) {
			// Saved again without a change after an error: stop.
			return fmt.Errorf("%w; TalosConfigPatch %s was not changed", problem, old.Name)
		}
		_, _ = fmt.Fprintf(r.errOut, "error: %v\n", problem)
		text = "# Error: " + strings.ReplaceAll(problem.Error(), "\n", "\n# ") + "\n#\n" + stripComments(edited)
	}
}

// checkEdited reads the edited file and validates it: the typed schema, the
// name unchanged, and a configuration machinery accepts on every machine.
func (r *run) checkEdited(ctx context.Context, old *ichorv1alpha1.TalosConfigPatch, edited string) (*ichorv1alpha1.TalosConfigPatch, error) {
	p, err := decodePatch([]byte(stripComments(edited)), "the edited file")
	if err != nil {
		return nil, err
	}
	if p.Name != old.Name {
		return nil, fmt.Errorf("metadata.name changed from %s to %q: a patch cannot be renamed; create a new one with `ichor patch create`", old.Name, p.Name)
	}
	updated := old.DeepCopy()
	updated.Spec = p.Spec
	imp, err := r.previewEdit(ctx, plan.PatchEdit{Old: old, New: updated})
	if err != nil {
		return nil, err
	}
	if !imp.Valid() {
		return nil, invalidImpact(&imp)
	}
	return updated, nil
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// runEditor opens text in $VISUAL or $EDITOR and returns what was saved.
func (r *run) runEditor(text string) (string, error) {
	editor := os.Getenv("VISUAL")
	if editor == "" {
		editor = os.Getenv("EDITOR")
	}
	if editor == "" {
		return "", errors.New("no editor: set $EDITOR (for example EDITOR=vi), or use `ichor patch create NAME --from-file FILE` after `ichor patch get NAME -o yaml`")
	}
	dir, err := os.MkdirTemp("", "ichor-patch-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	file := filepath.Join(dir, "patch.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		return "", err
	}
	fields := strings.Fields(editor)
	c := exec.CommandContext(context.Background(), fields[0], append(fields[1:], file)...) //nolint:gosec // the user's own $EDITOR
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("the editor %q failed: %w; nothing was changed", editor, err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimLeft(b, "\ufeff")), nil
}

// impactDiff is `ichor config diff --with FILE` without a machine: the
// impact preview of each patch of the file (plan.Preview, as the console's
// Preview), against the patch of its name in the namespace.
func impactDiff(ctx context.Context, cmd *cli.Command) error {
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	proposed, err := readPatches(cmd.String("with"), r.ns())
	if err != nil {
		return err
	}
	impacts := make([]plan.Impact, 0, len(proposed))
	for i := range proposed {
		p := &proposed[i]
		e := plan.PatchEdit{New: p}
		verb := "Creating"
		old := &ichorv1alpha1.TalosConfigPatch{}
		switch err := r.c().Get(ctx, client.ObjectKey{Namespace: r.ns(), Name: p.Name}, old); {
		case err == nil:
			e.Old, verb = old, "Changing"
		case !apierrors.IsNotFound(err):
			return r.conn.Explain(err, "reading TalosConfigPatch "+p.Name)
		}
		imp, err := r.previewEdit(ctx, e)
		if err != nil {
			return err
		}
		impacts = append(impacts, imp)
		if r.format == output.Table {
			if i > 0 {
				r.printf("\n")
			}
			writeImpact(r.out, verb, &imp)
		}
	}
	if r.format != output.Table {
		return output.Object(r.out, r.format, impacts)
	}
	return nil
}
