// Command ichor-ui is Ichor's web console backend: the UI API over gRPC and
// REST, sign-in, and the embedded single-page application. It reads nodes and
// never writes to them. The services arrive with the ichor-ui backend work;
// today the binary only reports its version.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/maeshinshin/ichor/contracts/pkg/version"
)

func main() {
	showVersion := flag.Bool("version", false, "Print the version and exit.")
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Get())
		return
	}
	fmt.Fprintln(os.Stderr, "ichor-ui: the server is not implemented yet; run with --version")
	os.Exit(2)
}
