// Command ichor-installer is the Job image that installs and upgrades Ichor in
// the cluster it manages (CRD checks, apply, snapshot, rollback) and runs the
// ichor-cni Job. The install steps arrive with the self-upgrade work; today the
// binary only reports its version.
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
	fmt.Fprintln(os.Stderr, "ichor-installer: no install step is implemented yet; run with --version")
	os.Exit(2)
}
