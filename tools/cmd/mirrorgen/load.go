package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

// machinery is what the generator learns from the loaded packages.
type machinery struct {
	// roots maps a registered kind to the document's named struct type.
	roots map[string]*types.Named
	// fieldDocs maps the position of a struct field to its description.
	fieldDocs map[token.Pos]string
	// typeDocs maps the position of a type name to its description.
	typeDocs map[token.Pos]string
}

func load(pattern string) (*machinery, error) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo |
			packages.NeedImports | packages.NeedDeps,
	}

	pkgs, err := packages.Load(cfg, pattern)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", pattern, err)
	}

	var errs []error

	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			errs = append(errs, e)
		}
	})

	if len(errs) > 0 {
		return nil, fmt.Errorf("loading %s: %w", pattern, errors.Join(errs...))
	}

	m := &machinery{
		roots:     map[string]*types.Named{},
		fieldDocs: map[token.Pos]string{},
		typeDocs:  map[token.Pos]string{},
	}

	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, f := range p.Syntax {
			collectDocs(m, f)
		}
	})

	for _, p := range pkgs {
		for _, f := range p.Syntax {
			if err := collectRegistrations(m, p, f); err != nil {
				return nil, err
			}
		}
	}

	if len(m.roots) == 0 {
		return nil, fmt.Errorf("no registry.Register calls found in %s", pattern)
	}

	return m, nil
}

// collectRegistrations finds registry.Register(kind, func(version) config.Document {...})
// and records the type of the document the function returns for any version.
func collectRegistrations(m *machinery, p *packages.Package, f *ast.File) error {
	var err error

	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 2 {
			return true
		}

		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Register" {
			return true
		}

		fn, ok := p.TypesInfo.Uses[sel.Sel].(*types.Func)
		if !ok || fn.Pkg() == nil || !strings.HasSuffix(fn.Pkg().Path(), "/config/internal/registry") {
			return true
		}

		tv := p.TypesInfo.Types[call.Args[0]]
		if tv.Value == nil || tv.Value.Kind() != constant.String {
			err = fmt.Errorf("%s: registry.Register with a non-constant kind", p.Fset.Position(call.Pos()))

			return false
		}

		kind := constant.StringVal(tv.Value)

		var found *types.Named

		ast.Inspect(call.Args[1], func(n ast.Node) bool {
			ret, ok := n.(*ast.ReturnStmt)
			if !ok || len(ret.Results) != 1 {
				return true
			}

			t := p.TypesInfo.Types[ret.Results[0]].Type
			if ptr, ok := t.(*types.Pointer); ok {
				t = ptr.Elem()
			}

			if named, ok := t.(*types.Named); ok {
				if found != nil && found != named {
					err = fmt.Errorf("kind %s: several document types (%s, %s); only one version is expected", kind, found, named)
				}

				found = named
			}

			return true
		})

		if found == nil {
			err = fmt.Errorf("kind %s: cannot find the document type", kind)

			return false
		}

		if _, dup := m.roots[kind]; dup {
			err = fmt.Errorf("kind %s registered twice", kind)

			return false
		}

		m.roots[kind] = found

		return true
	})

	return err
}

func collectDocs(m *machinery, f *ast.File) {
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GenDecl:
			if n.Tok != token.TYPE {
				return true
			}

			for _, spec := range n.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok {
					continue
				}

				doc := ts.Doc
				if doc == nil && len(n.Specs) == 1 {
					doc = n.Doc
				}

				if d := description(doc); d != "" {
					m.typeDocs[ts.Name.Pos()] = d
				}
			}
		case *ast.Field:
			d := description(n.Doc)
			if d == "" {
				d = description(n.Comment)
			}

			if d == "" {
				return true
			}

			for _, name := range n.Names {
				m.fieldDocs[name.Pos()] = d
			}

			if len(n.Names) == 0 {
				m.fieldDocs[n.Type.Pos()] = d
			}
		}

		return true
	})
}

// description extracts the "description:" block of machinery's docgen
// comments; comments without one yield their plain text, minus directives.
func description(cg *ast.CommentGroup) string {
	if cg == nil {
		return ""
	}

	lines := strings.Split(cg.Text(), "\n")

	start := -1

	for i, l := range lines {
		if strings.TrimSpace(l) == "description: |" || strings.HasPrefix(strings.TrimSpace(l), "description:") {
			start = i

			break
		}
	}

	if start < 0 {
		var plain []string

		for _, l := range lines {
			t := strings.TrimSpace(l)
			if t == "" || strings.HasPrefix(t, "docgen") || strings.Contains(t, ":") && isDocgenKey(t) {
				continue
			}

			plain = append(plain, t)
		}

		return strings.Join(plain, "\n")
	}

	head := strings.TrimSpace(lines[start])
	indent := leadingSpace(lines[start])

	if rest := strings.TrimSpace(strings.TrimPrefix(head, "description:")); rest != "" && rest != "|" {
		return strings.Trim(rest, `"`)
	}

	var out []string

	for _, l := range lines[start+1:] {
		if strings.TrimSpace(l) == "" {
			out = append(out, "")

			continue
		}

		if leadingSpace(l) <= indent {
			break
		}

		out = append(out, strings.TrimSpace(l))
	}

	return strings.TrimSpace(strings.Join(out, "\n"))
}

func isDocgenKey(l string) bool {
	for _, k := range []string{"examples:", "alias:", "schemaRoot:", "schemaMeta:", "values:", "schema:", "- value:", "type:", "docgen:"} {
		if strings.HasPrefix(l, k) {
			return true
		}
	}

	return false
}

func leadingSpace(s string) int {
	return len(s) - len(strings.TrimLeft(s, " \t"))
}

func sortedKinds(roots map[string]*types.Named) []string {
	kinds := make([]string, 0, len(roots))
	for k := range roots {
		kinds = append(kinds, k)
	}

	sort.Strings(kinds)

	return kinds
}
