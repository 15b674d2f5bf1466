package main

import (
	"bytes"
	"fmt"
	"go/types"
	"strconv"
	"strings"
)

type convGen struct {
	g     *generator
	imp   *importSet
	b     bytes.Buffer
	n     int
	mir   string // alias of the mirror package, with a trailing dot
	where string
}

func (c *convGen) linef(format string, args ...any) {
	fmt.Fprintf(&c.b, format+"\n", args...)
}

func (c *convGen) v(prefix string) string {
	c.n++

	return prefix + strconv.Itoa(c.n)
}

func (c *convGen) qualifier(p *types.Package) string {
	alias := p.Name()

	if strings.Contains(strings.Split(p.Path(), "/")[0], ".") {
		alias = "tal" + p.Name()
		if strings.Contains(p.Path(), "/resources/") {
			alias = "talres" + p.Name()
		}
	}

	return c.imp.add(p.Path(), alias)
}

func (c *convGen) machType(t types.Type) string {
	return types.TypeString(t, c.qualifier)
}

func (c *convGen) mirType(t types.Type) string {
	return c.g.mirrorType(t, c.imp, c.mir)
}

func (c *convGen) fail(what string) string {
	return fmt.Sprintf("return fmt.Errorf(\"%s: %%w\", err)", strings.ReplaceAll(what, `"`, `\"`))
}

func isByteSlice(t types.Type) bool {
	s, ok := types.Unalias(t).Underlying().(*types.Slice)
	if !ok {
		return false
	}

	b, ok := s.Elem().Underlying().(*types.Basic)

	return ok && b.Kind() == types.Byte
}

// assign writes statements that set out (an addressable expression of the
// target side) from in (an expression of the source side); t is the
// machinery type of the value.
func (c *convGen) assign(toM bool, out, in string, t types.Type) {
	t = types.Unalias(t)

	outType := func() string {
		if toM {
			return c.machType(t)
		}

		return c.mirType(t)
	}

	if n, ok := t.(*types.Named); ok {
		key := typeKey(n)

		if s, ok := substitutions[key]; ok {
			fn := s.FromMachinery
			if toM {
				fn = s.ToMachinery
			}

			v := c.v("v")
			c.linef("{")
			c.linef("%s, err := %s(%s)", v, fn, in)
			c.linef("if err != nil {\n%s\n}", c.fail(c.where))
			c.linef("%s = %s", out, v)
			c.linef("}")

			return
		}

		if si, ok := c.g.structs[n]; ok {
			dir := "FromMachinery"
			if toM {
				dir = "ToMachinery"
			}

			c.linef("if err := convert%s%s(&%s, &%s); err != nil {\nreturn err\n}", si.Mirror, dir, in, out)

			return
		}

		leaf, _ := c.g.classify(n)

		if leaf == leafText {
			if toM {
				c.linef("if %s != \"\" {", in)
				c.linef("if err := %s.UnmarshalText([]byte(%s)); err != nil {\n%s\n}", out, in, c.fail(c.where))
				c.linef("}")

				return
			}

			cond := in + " != 0"
			if isByteSlice(n) {
				cond = "len(" + in + ") != 0"
			}

			v := c.v("text")
			c.linef("if %s {", cond)
			c.linef("%s, err := %s.MarshalText()", v, in)
			c.linef("if err != nil {\n%s\n}", c.fail(c.where))
			c.linef("%s = string(%s)", out, v)
			c.linef("}")

			return
		}

		// A plain named type: convert through its underlying structure.
		switch u := n.Underlying().(type) {
		case *types.Basic:
			c.basic(toM, out, in, u, outType())

			return
		case *types.Slice, *types.Map:
			c.container(toM, out, in, u, outType())

			return
		}

		panic(fmt.Sprintf("assign: unsupported named type %s", key))
	}

	switch u := t.(type) {
	case *types.Basic:
		if u.Kind() != types.Uint32 {
			c.linef("%s = %s", out, in)

			return
		}

		c.basic(toM, out, in, u, outType())
	case *types.Pointer:
		elemType := c.mirType(u.Elem())
		if toM {
			elemType = c.machType(u.Elem())
		}

		c.linef("if %s != nil {", in)
		c.linef("%s = new(%s)", out, elemType)
		c.assign(toM, "(*"+out+")", "(*"+in+")", u.Elem())
		c.linef("}")
	case *types.Slice, *types.Map:
		c.container(toM, out, in, u, outType())
	default:
		panic(fmt.Sprintf("assign: unsupported type %s", t))
	}
}

// basic converts a value of a basic (or named basic) type; outType is the
// target's type expression. uint32 is mirrored as int64 (see mirrorType),
// so the conversion to machinery checks the range.
func (c *convGen) basic(toM bool, out, in string, u *types.Basic, outType string) {
	if u.Kind() == types.Uint32 && toM {
		c.imp.add("math", "math")
		c.linef("if %s < 0 || %s > math.MaxUint32 {\nreturn fmt.Errorf(\"%s: %%d is out of range for an unsigned 32-bit value\", %s)\n}", in, in, c.where, in)
	}

	c.linef("%s = %s(%s)", out, outType, in)
}

func (c *convGen) container(toM bool, out, in string, u types.Type, outType string) {
	switch u := u.(type) {
	case *types.Slice:
		if b, ok := u.Elem().Underlying().(*types.Basic); ok && b.Kind() == types.Byte {
			c.imp.add("bytes", "bytes")
			c.linef("%s = %s(bytes.Clone(%s))", out, outType, in)

			return
		}

		i := c.v("i")
		c.linef("if %s != nil {", in)
		c.linef("%s = make(%s, len(%s))", out, outType, in)
		c.linef("for %s := range %s {", i, in)
		c.assign(toM, out+"["+i+"]", in+"["+i+"]", u.Elem())
		c.linef("}")
		c.linef("}")
	case *types.Map:
		k, v, o := c.v("k"), c.v("v"), c.v("o")

		elemType := c.mirType(u.Elem())
		keyType := goString

		if toM {
			elemType = c.machType(u.Elem())
			keyType = c.machType(u.Key())
		}

		c.linef("if %s != nil {", in)
		c.linef("%s = make(%s, len(%s))", out, outType, in)
		c.linef("for %s, %s := range %s {", k, v, in)
		c.linef("var %s %s", o, elemType)
		c.assign(toM, o, v, u.Elem())
		c.linef("%s[%s(%s)] = %s", out, keyType, k, o)
		c.linef("}")
		c.linef("}")
	}
}

func (g *generator) emitConvert() ([]byte, error) {
	c := &convGen{g: g, imp: newImportSet()}
	c.mir = c.imp.add(g.mirrorImport, "mirror") + "."
	c.imp.add("fmt", "fmt")
	configAlias := c.imp.add("github.com/siderolabs/talos/pkg/machinery/config/config", "talconfig")

	// Per-kind entry points.
	for _, ki := range g.kinds {
		si := g.structs[ki.Type]
		mt := c.machType(ki.Type)

		c.linef("// %sToMachinery converts the mirror of a %s document to machinery's type.", ki.Mirror, ki.Kind)
		c.linef("func %sToMachinery(in *%s%s) (*%s, error) {", ki.Mirror, c.mir, si.Mirror, mt)
		c.linef("if in == nil {\nreturn nil, nil\n}")
		c.linef("out := &%s{}", mt)

		if ki.HasMeta {
			c.linef("out.MetaAPIVersion = %q", "v1alpha1")
			c.linef("out.MetaKind = %q", ki.Kind)
		}

		if ki.VersionField != "" {
			c.linef("out.%s = %q", ki.VersionField, "v1alpha1")
		}

		c.linef("if err := convert%sToMachinery(in, out); err != nil {\nreturn nil, fmt.Errorf(\"%s: %%w\", err)\n}", si.Mirror, ki.Kind)
		c.linef("return out, nil\n}\n")

		c.linef("// %sFromMachinery converts a machinery %s document to its mirror.", ki.Mirror, ki.Kind)
		c.linef("func %sFromMachinery(in *%s) (*%s%s, error) {", ki.Mirror, mt, c.mir, si.Mirror)
		c.linef("if in == nil {\nreturn nil, nil\n}")
		c.linef("out := &%s%s{}", c.mir, si.Mirror)
		c.linef("if err := convert%sFromMachinery(in, out); err != nil {\nreturn nil, fmt.Errorf(\"%s: %%w\", err)\n}", si.Mirror, ki.Kind)
		c.linef("return out, nil\n}\n")
	}

	// Dispatchers.
	c.linef("// ToMachinery converts a pointer to a mirror document type to the machinery document.")
	c.linef("func ToMachinery(doc any) (%s.Document, error) {", configAlias)
	c.linef("switch d := doc.(type) {")

	for _, ki := range g.kinds {
		c.linef("case *%s%s:", c.mir, ki.Mirror)
		c.linef("return %sToMachinery(d)", ki.Mirror)
	}

	c.linef("default:\nreturn nil, fmt.Errorf(\"%%T is not a mirror document type\", doc)\n}\n}\n")

	c.linef("// FromMachinery converts a machinery document to a pointer to its mirror type.")
	c.linef("func FromMachinery(doc %s.Document) (any, error) {", configAlias)
	c.linef("switch d := doc.(type) {")

	for _, ki := range g.kinds {
		c.linef("case *%s:", c.machType(ki.Type))
		c.linef("return %sFromMachinery(d)", ki.Mirror)
	}

	c.linef("default:\nreturn nil, fmt.Errorf(\"document kind %%q (%%T) is not mirrored\", doc.Kind(), doc)\n}\n}\n")

	// Struct converters.
	for _, si := range g.sortedStructs() {
		mt := c.machType(si.Named)

		for _, toM := range []bool{true, false} {
			if toM {
				c.linef("func convert%sToMachinery(in *%s%s, out *%s) error {", si.Mirror, c.mir, si.Mirror, mt)
			} else {
				c.linef("func convert%sFromMachinery(in *%s, out *%s%s) error {", si.Mirror, mt, c.mir, si.Mirror)
			}

			for _, f := range si.Fields {
				machExpr := strings.Join(f.GoPath, ".")
				c.where = si.Mirror + "." + f.JSON

				inExpr, outExpr := "in."+f.Name, "out."+machExpr
				if !toM {
					inExpr, outExpr = "in."+machExpr, "out."+f.Name
				}

				if f.Typed != "" {
					ts := typedSchemas[f.Typed]

					fn := ts.FromMachinery
					if toM {
						fn = ts.ToMachinery
					}

					v := c.v("v")
					c.linef("{")
					c.linef("%s, err := %s(%s)", v, fn, inExpr)
					c.linef("if err != nil {\n%s\n}", c.fail(c.where))
					c.linef("%s = %s", outExpr, v)
					c.linef("}")

					continue
				}

				c.assign(toM, outExpr, inExpr, f.Type)
			}

			c.linef("return nil\n}\n")
		}
	}

	var b bytes.Buffer

	b.WriteString(header)
	b.WriteString("package convert\n\n")
	c.imp.write(&b)
	b.Write(c.b.Bytes())

	return formatSource("zz_generated.convert.go", b.Bytes())
}
