// Command mirrorgen generates Ichor's mirror types of the Talos configuration
// documents, with conversions both ways, from Talos machinery's own Go types.
//
// Machinery is YAML-first and carries no JSON tags, and several of its field
// types have no exported fields, so controller-gen cannot take its types. The
// generator loads machinery's config/types packages with go/packages, finds
// every document kind registered with registry.Register, walks the Go types
// reachable from each and writes:
//
//   - <out>/zz_generated.mirror.go: one mirror type per document kind and per
//     nested struct, with JSON tags, kubebuilder markers and the field
//     documentation taken from machinery's own comments;
//   - <out>/zz_generated.fields.go: the kinds mirrored, the secret fields and
//     the other dropped fields with their reasons;
//   - <convert-out>/zz_generated.convert.go: ToMachinery/FromMachinery
//     functions per kind plus the dispatchers.
//
// The reviewed tables that steer it (type-keyed substitutions, the
// meta.Unstructured override table, the secret-field table) are in rules.go.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
)

const machineryTypes = "github.com/siderolabs/talos/pkg/machinery/config/types/..."

func main() {
	out := flag.String("out", ".", "directory of the mirror package")
	convertOut := flag.String("convert-out", "./convert", "directory of the conversion package")
	mirrorImport := flag.String("mirror-import", "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config", "import path of the mirror package")
	flag.Parse()

	log.SetFlags(0)
	log.SetPrefix("mirrorgen: ")

	if err := run(*out, *convertOut, *mirrorImport); err != nil {
		log.Fatal(err)
	}
}

func run(out, convertOut, mirrorImport string) error {
	m, err := load(machineryTypes)
	if err != nil {
		return err
	}

	g := newGenerator(m, mirrorImport)
	if err := g.build(); err != nil {
		return err
	}

	files := map[string][]byte{}

	if files[filepath.Join(out, "zz_generated.mirror.go")], err = g.emitMirror(); err != nil {
		return err
	}

	if files[filepath.Join(out, "zz_generated.fields.go")], err = g.emitFields(); err != nil {
		return err
	}

	if files[filepath.Join(convertOut, "zz_generated.convert.go")], err = g.emitConvert(); err != nil {
		return err
	}

	for path, b := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return err
		}

		if err := os.WriteFile(path, b, 0o644); err != nil { //nolint:gosec // generated source, world-readable like the rest of the tree
			return err
		}
	}

	fmt.Fprintf(os.Stderr, "mirrorgen: %d/%d kinds mirrored, %d struct types, %d secret fields dropped, %d other fields dropped, %d fields typed from upstream schemas\n",
		len(g.kinds), len(m.roots), len(g.structs), len(g.secretPaths), len(g.droppedPaths), len(g.typedPaths))

	return nil
}
