package main

import (
	"errors"
	"fmt"
	"go/types"
	"reflect"
	"sort"
	"strings"
	"unicode"
)

type kindInfo struct {
	Kind   string
	Mirror string
	Type   *types.Named
	// HasMeta is true when the document embeds meta.Meta (apiVersion, kind).
	HasMeta bool
	// VersionField is the legacy document's version field, set on conversion.
	VersionField string
}

type fieldInfo struct {
	// GoPath is the access path in the machinery struct (more than one
	// element when the field comes from an inlined embedded struct).
	GoPath []string
	JSON   string
	Name   string
	Type   types.Type
	Doc    string
	// Typed is the key of typedSchemas for an Unstructured field mirrored as an upstream type.
	Typed string
}

type structInfo struct {
	Named  *types.Named
	Mirror string
	Doc    string
	Fields []*fieldInfo
	// Paths are the document paths at which the type occurs (for docs).
	Paths []string
}

// fieldKey identifies a field of a machinery struct type.
type fieldKey struct {
	Type   *types.Named
	GoPath string
}

type rawField struct {
	GoPath []string
	JSON   string
	Var    *types.Var
}

type generator struct {
	m            *machinery
	mirrorImport string

	kinds   []*kindInfo
	structs map[*types.Named]*structInfo
	// fieldPaths are the document paths of every field, in walk order.
	fieldPaths map[fieldKey][]string
	// drop is the reason a field is dropped ("secret" for secret fields).
	drop map[fieldKey]string
	// typed is the typed schema of an Unstructured field.
	typed map[fieldKey]string
	// setByConversion are fields the conversion sets from the kind.
	setByConversion map[fieldKey]bool

	secretPaths  []string
	droppedPaths map[string]string
	typedPaths   map[string]string
	// sharedSecretPaths are paths dropped because the same Go field is a secret elsewhere.
	sharedSecretPaths []string
}

func newGenerator(m *machinery, mirrorImport string) *generator {
	return &generator{
		m:               m,
		mirrorImport:    mirrorImport,
		structs:         map[*types.Named]*structInfo{},
		fieldPaths:      map[fieldKey][]string{},
		drop:            map[fieldKey]string{},
		typed:           map[fieldKey]string{},
		setByConversion: map[fieldKey]bool{},
		droppedPaths:    map[string]string{},
		typedPaths:      map[string]string{},
	}
}

func typeKey(n *types.Named) string {
	if n.Obj().Pkg() == nil {
		return n.Obj().Name()
	}

	return n.Obj().Pkg().Path() + "." + n.Obj().Name()
}

func isUnstructured(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)

	return ok && typeKey(n) == pkgMeta+".Unstructured"
}

func isMeta(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)

	return ok && typeKey(n) == pkgMeta+".Meta"
}

// leafKind classifies a named type that is not mirrored as a struct.
type leafKind int

const (
	leafNone leafKind = iota
	leafSubst
	leafText
	leafPlain // named basic or named []byte/slice/map converted by a Go conversion
)

func hasMethod(n *types.Named, name string) bool {
	obj, _, _ := types.LookupFieldOrMethod(types.NewPointer(n), true, n.Obj().Pkg(), name)

	return obj != nil
}

func (g *generator) classify(n *types.Named) (leafKind, error) {
	key := typeKey(n)

	if _, ok := substitutions[key]; ok {
		return leafSubst, nil
	}

	if _, ok := n.Underlying().(*types.Struct); ok {
		if structuralTypes[key] {
			return leafNone, nil
		}

		if hasMethod(n, "MarshalYAML") || hasMethod(n, "MarshalText") || hasMethod(n, "MarshalJSON") {
			return 0, fmt.Errorf("%s has a custom marshaler and no substitution or structural entry", key)
		}

		return leafNone, nil
	}

	if n.Obj().Pkg() != nil && textTypePackages[n.Obj().Pkg().Path()] && hasMethod(n, "MarshalText") {
		return leafText, nil
	}

	if integerTypes[key] || byteTypes[key] {
		return leafPlain, nil
	}

	if hasMethod(n, "MarshalYAML") || hasMethod(n, "MarshalText") || hasMethod(n, "MarshalJSON") {
		return 0, fmt.Errorf("%s has a custom marshaler and no table entry says how to mirror it", key)
	}

	return leafPlain, nil
}

// rawFields lists the YAML-visible fields of a struct, flattening inlined
// embedded structs; meta.Meta is left out (it is set from the kind).
func rawFields(n *types.Named) ([]rawField, error) {
	st, ok := n.Underlying().(*types.Struct)
	if !ok {
		return nil, fmt.Errorf("%s is not a struct", typeKey(n))
	}

	var out []rawField

	for i := range st.NumFields() {
		f := st.Field(i)
		tag := reflect.StructTag(st.Tag(i)).Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")

		if name == "-" {
			continue
		}

		if !f.Exported() {
			return nil, fmt.Errorf("%s has the unexported field %s and no substitution", typeKey(n), f.Name())
		}

		if f.Embedded() {
			if strings.Contains(opts, "inline") {
				if isMeta(f.Type()) {
					continue
				}

				en, ok := types.Unalias(f.Type()).(*types.Named)
				if !ok {
					return nil, fmt.Errorf("%s: inlined field %s is not a named struct", typeKey(n), f.Name())
				}

				sub, err := rawFields(en)
				if err != nil {
					return nil, err
				}

				for _, s := range sub {
					s.GoPath = append([]string{f.Name()}, s.GoPath...)
					out = append(out, s)
				}

				continue
			}

			return nil, fmt.Errorf("%s: embedded field %s is not inlined", typeKey(n), f.Name())
		}

		if strings.Contains(opts, "inline") {
			return nil, fmt.Errorf("%s: inline field %s is not embedded", typeKey(n), f.Name())
		}

		if name == "" {
			name = strings.ToLower(f.Name())
		}

		out = append(out, rawField{GoPath: []string{f.Name()}, JSON: name, Var: f})
	}

	return out, nil
}

func (g *generator) build() error {
	kindOf := map[*types.Named]string{}

	for _, kind := range sortedKinds(g.m.roots) {
		n := g.m.roots[kind]
		ki := &kindInfo{Kind: kind, Type: n, Mirror: kind}

		if name, ok := rootNames[kind]; ok {
			ki.Mirror = name
		}

		st, ok := n.Underlying().(*types.Struct)
		if !ok {
			return fmt.Errorf("kind %s: %s is not a struct", kind, typeKey(n))
		}

		for i := range st.NumFields() {
			if st.Field(i).Embedded() && isMeta(st.Field(i).Type()) {
				ki.HasMeta = true
			}

			if tag := reflect.StructTag(st.Tag(i)).Get("yaml"); tag == "version" && kind == "v1alpha1" {
				// The legacy document's version, like apiVersion and kind
				// elsewhere, follows from the kind: the conversion sets it.
				ki.VersionField = st.Field(i).Name()
				g.setByConversion[fieldKey{Type: n, GoPath: ki.VersionField}] = true
			}
		}

		if !ki.HasMeta && ki.VersionField == "" {
			return fmt.Errorf("kind %s: neither meta.Meta nor a version field", kind)
		}

		kindOf[n] = kind
		g.kinds = append(g.kinds, ki)
	}

	// Pass 1: every path of every field.
	for _, ki := range g.kinds {
		if err := g.walkPaths(ki.Type, ki.Kind, "", map[*types.Named]bool{}); err != nil {
			return fmt.Errorf("kind %s: %w", ki.Kind, err)
		}
	}

	// Pass 2: decide which fields are dropped or typed.
	if err := g.decide(); err != nil {
		return err
	}

	// Pass 3: the mirrored structs, reachable without the dropped fields.
	for _, ki := range g.kinds {
		if err := g.collect(ki.Type); err != nil {
			return fmt.Errorf("kind %s: %w", ki.Kind, err)
		}
	}

	return g.name(kindOf)
}

func joinPath(path, seg string) string {
	if path == "" {
		return seg
	}

	return path + "." + seg
}

func (g *generator) walkPaths(n *types.Named, kind, path string, stack map[*types.Named]bool) error {
	if stack[n] {
		return fmt.Errorf("recursive type %s at %s", typeKey(n), path)
	}

	stack[n] = true
	defer delete(stack, n)

	fields, err := rawFields(n)
	if err != nil {
		return err
	}

	for _, f := range fields {
		p := joinPath(path, f.JSON)
		key := fieldKey{Type: n, GoPath: strings.Join(f.GoPath, ".")}
		g.fieldPaths[key] = append(g.fieldPaths[key], kind+":"+p)

		if err := g.walkTypePaths(f.Var.Type(), kind, p, stack); err != nil {
			return err
		}
	}

	return nil
}

func (g *generator) walkTypePaths(t types.Type, kind, path string, stack map[*types.Named]bool) error {
	switch u := types.Unalias(t).(type) {
	case *types.Pointer:
		return g.walkTypePaths(u.Elem(), kind, path, stack)
	case *types.Slice:
		if b, ok := u.Elem().Underlying().(*types.Basic); ok && b.Kind() == types.Byte {
			return nil
		}

		return g.walkTypePaths(u.Elem(), kind, path+"[]", stack)
	case *types.Map:
		if b, ok := u.Key().Underlying().(*types.Basic); !ok || b.Kind() != types.String {
			return fmt.Errorf("%s: map key %s is not a string", path, u.Key())
		}

		return g.walkTypePaths(u.Elem(), kind, path+"{*}", stack)
	case *types.Basic:
		if u.Info()&(types.IsFloat|types.IsComplex) != 0 {
			return fmt.Errorf("%s: floating-point field", path)
		}

		return nil
	case *types.Named:
		if isUnstructured(u) {
			g.fieldPaths[fieldKey{Type: u, GoPath: ""}] = append(g.fieldPaths[fieldKey{Type: u, GoPath: ""}], kind+":"+path)

			return nil
		}

		leaf, err := g.classify(u)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}

		switch leaf {
		case leafNone:
			return g.walkPaths(u, kind, path, stack)
		case leafPlain:
			return g.walkTypePaths(u.Underlying(), kind, path, stack)
		default:
			return nil
		}
	default:
		return fmt.Errorf("%s: unsupported type %s", path, t)
	}
}

// elemUnstructured reports whether t is meta.Unstructured, possibly behind
// pointers and slices (machine.pods is a list of them).
func elemUnstructured(t types.Type) bool {
	for {
		switch u := types.Unalias(t).(type) {
		case *types.Pointer:
			t = u.Elem()
		case *types.Slice:
			t = u.Elem()
		default:
			return isUnstructured(t)
		}
	}
}

func (g *generator) decide() error {
	secret := map[string]bool{}
	for _, p := range secretFields {
		secret[p] = true
	}

	unstructuredSeen := map[string]bool{}
	secretSeen := map[string]bool{}

	keys := make([]fieldKey, 0, len(g.fieldPaths))
	for k := range g.fieldPaths {
		if k.GoPath != "" {
			keys = append(keys, k)
		}
	}

	var errs []error

	for _, k := range keys {
		paths := g.fieldPaths[k]

		isSecret := false

		for _, p := range paths {
			if secret[p] {
				isSecret = true
				secretSeen[p] = true
			}
		}

		if isSecret {
			g.drop[k] = "secret"

			for _, p := range paths {
				if _, ok := unstructuredFields[p]; ok {
					unstructuredSeen[p] = true
				}
			}

			continue
		}

		v := fieldVar(k)
		if !elemUnstructured(v.Type()) {
			continue
		}

		var action *unstructuredAction

		for _, p := range paths {
			a, ok := unstructuredFields[p]
			if !ok {
				errs = append(errs, fmt.Errorf("meta.Unstructured field %s is not in the override table", p))

				continue
			}

			unstructuredSeen[p] = true

			if action != nil && *action != a {
				errs = append(errs, fmt.Errorf("meta.Unstructured field %s: its Go field %s is shared with paths that have a different override", p, k.GoPath))
			}

			action = &a
		}

		if action == nil {
			continue
		}

		if action.Typed != "" {
			if _, ok := typedSchemas[action.Typed]; !ok {
				errs = append(errs, fmt.Errorf("unknown typed schema %q", action.Typed))
			}

			if _, ok := types.Unalias(v.Type()).(*types.Named); !ok {
				errs = append(errs, fmt.Errorf("%v: a typed schema needs a plain meta.Unstructured field", paths))
			}

			g.typed[k] = action.Typed

			for _, p := range paths {
				g.typedPaths[p] = action.Typed
			}

			continue
		}

		g.drop[k] = action.Reason

		for _, p := range paths {
			g.droppedPaths[p] = action.Reason
		}
	}

	for p := range unstructuredFields {
		if !unstructuredSeen[p] {
			errs = append(errs, fmt.Errorf("override table entry %s matches no meta.Unstructured field (did machinery move it?)", p))
		}
	}

	for _, p := range secretFields {
		if !secretSeen[p] {
			errs = append(errs, fmt.Errorf("secret table entry %s matches no field (did machinery move it?)", p))
		}
	}

	g.secretPaths = append([]string(nil), secretFields...)
	sort.Strings(g.secretPaths)

	for k, reason := range g.drop {
		if reason != "secret" {
			continue
		}

		for _, p := range g.fieldPaths[k] {
			if !secret[p] {
				g.sharedSecretPaths = append(g.sharedSecretPaths, p)
			}
		}
	}

	sort.Strings(g.sharedSecretPaths)

	return errors.Join(errs...)
}

// fieldVar finds the *types.Var of a field key.
func fieldVar(k fieldKey) *types.Var {
	t := types.Type(k.Type)

	var v *types.Var

	for _, name := range strings.Split(k.GoPath, ".") {
		st := types.Unalias(t).Underlying().(*types.Struct)

		for i := range st.NumFields() {
			if st.Field(i).Name() == name {
				v = st.Field(i)
			}
		}

		t = v.Type()
	}

	return v
}

func (g *generator) collect(n *types.Named) error {
	if _, ok := g.structs[n]; ok {
		return nil
	}

	si := &structInfo{Named: n, Doc: g.m.typeDocs[n.Obj().Pos()]}
	g.structs[n] = si

	fields, err := rawFields(n)
	if err != nil {
		return err
	}

	names := map[string]bool{}

	for _, f := range fields {
		key := fieldKey{Type: n, GoPath: strings.Join(f.GoPath, ".")}
		if _, dropped := g.drop[key]; dropped {
			continue
		}

		if g.setByConversion[key] {
			continue
		}

		fi := &fieldInfo{
			GoPath: f.GoPath,
			JSON:   f.JSON,
			Name:   goName(f.JSON),
			Type:   f.Var.Type(),
			Doc:    g.m.fieldDocs[f.Var.Pos()],
			Typed:  g.typed[key],
		}

		if names[fi.Name] {
			return fmt.Errorf("%s: two fields map to %s", typeKey(n), fi.Name)
		}

		names[fi.Name] = true
		si.Fields = append(si.Fields, fi)

		if fi.Typed != "" {
			continue
		}

		if err := g.collectType(fi.Type); err != nil {
			return err
		}
	}

	return nil
}

func (g *generator) collectType(t types.Type) error {
	switch u := types.Unalias(t).(type) {
	case *types.Pointer:
		return g.collectType(u.Elem())
	case *types.Slice:
		return g.collectType(u.Elem())
	case *types.Map:
		return g.collectType(u.Elem())
	case *types.Named:
		leaf, err := g.classify(u)
		if err != nil {
			return err
		}

		switch leaf {
		case leafNone:
			return g.collect(u)
		case leafPlain:
			return g.collectType(u.Underlying())
		}
	}

	return nil
}

func goName(json string) string {
	var b strings.Builder

	upper := true

	for _, r := range json {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			upper = true

			continue
		}

		if upper {
			r = unicode.ToUpper(r)
			upper = false
		}

		b.WriteRune(r)
	}

	return b.String()
}

// pkgPrefix is used to tell apart nested types of the same name.
func pkgPrefix(n *types.Named) string {
	path := n.Obj().Pkg().Path()
	parts := strings.Split(path, "/")
	last := parts[len(parts)-1]

	switch {
	case strings.Contains(path, "/resources/"):
		return "Resource" + goName(last)
	default:
		return goName(last)
	}
}

// name assigns mirror type names: the kind for a document, otherwise the
// machinery name without its version suffix; types of the legacy v1alpha1
// package are prefixed V1Alpha1, and other clashes get their package's name.
func (g *generator) name(kindOf map[*types.Named]string) error {
	taken := map[string]*types.Named{}

	for _, ki := range g.kinds {
		g.structs[ki.Type].Mirror = ki.Mirror
		taken[ki.Mirror] = ki.Type
	}

	candidates := map[string][]*types.Named{}

	for n, si := range g.structs {
		if si.Mirror != "" {
			continue
		}

		base := strings.TrimSuffix(n.Obj().Name(), "V1Alpha1")
		if n.Obj().Pkg().Path() == pkgV1Alpha1 {
			base = "V1Alpha1" + base
		}

		candidates[base] = append(candidates[base], n)
	}

	bases := make([]string, 0, len(candidates))
	for b := range candidates {
		bases = append(bases, b)
	}

	sort.Strings(bases)

	for _, base := range bases {
		ns := candidates[base]
		if _, clash := taken[base]; len(ns) == 1 && !clash {
			g.structs[ns[0]].Mirror = base
			taken[base] = ns[0]

			continue
		}

		for _, n := range ns {
			name := pkgPrefix(n) + base
			if other, clash := taken[name]; clash {
				return fmt.Errorf("mirror name %s for %s clashes with %s", name, typeKey(n), typeKey(other))
			}

			g.structs[n].Mirror = name
			taken[name] = n
		}
	}

	_ = kindOf

	return nil
}

// sortedStructs returns the mirrored structs by mirror name.
func (g *generator) sortedStructs() []*structInfo {
	out := make([]*structInfo, 0, len(g.structs))
	for _, si := range g.structs {
		out = append(out, si)
	}

	sort.Slice(out, func(i, j int) bool { return out[i].Mirror < out[j].Mirror })

	return out
}
