package commands

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"

	"github.com/maeshinshin/ichor/cli/internal/initflow"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/userpass"
)

// errNotConfirmed ends init when the person declines the form's summary.
var errNotConfirmed = errors.New("not confirmed: nothing was changed; run `ichor init` again, or pass the settings as flags")

// Answers of the form.
const (
	answerAuto = "auto"
	answerYes  = "yes"
)

// maxTries is how often the form asks again after an answer it cannot use.
const maxTries = 3

// form asks on a terminal for what init needs and the flags did not give:
// the topology, the first node, the API endpoint and the install disk. Each
// answer is checked as the flag would be, and asked again when it is wrong.
type form struct {
	in  *bufio.Reader
	out io.Writer
	// given reports whether a flag was set on the command line: the form
	// never asks for those.
	given func(name string) bool
}

// ask prints the question with its default and returns the answer checked by
// check, the default for an empty line.
func (f *form) ask(question, def string, check func(string) error) (string, error) {
	for range maxTries {
		if def != "" {
			_, _ = fmt.Fprintf(f.out, "%s [%s]: ", question, def)
		} else {
			_, _ = fmt.Fprintf(f.out, "%s: ", question)
		}
		line, err := f.in.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		answer := strings.TrimSpace(line)
		if answer == "" {
			answer = def
		}
		if answer == "" && errors.Is(err, io.EOF) {
			return "", fmt.Errorf("no answer to %q on standard input; nothing was changed", question)
		}
		if cerr := check(answer); cerr != nil {
			_, _ = fmt.Fprintf(f.out, "  %v\n", cerr)
			if errors.Is(err, io.EOF) {
				return "", cerr
			}
			continue
		}
		return answer, nil
	}
	return "", fmt.Errorf("no usable answer to %q after %d tries; nothing was changed", question, maxTries)
}

// fill asks for what o lacks, then shows the result and asks to go on.
func (f *form) fill(o *initflow.Options) error {
	_, _ = fmt.Fprintln(f.out, "ichor init creates a cluster from its first control plane, booted in maintenance mode. Empty answers take the [default].")
	var err error
	if !f.given(flagCluster) {
		if o.Cluster, err = f.ask("Cluster name", o.Cluster, userpass.ValidateName); err != nil {
			return err
		}
	}
	if !f.given("preset") {
		_, _ = fmt.Fprintln(f.out, "Topologies: single (1 control plane that also runs workloads), compact-ha (3 that also run workloads),\n"+
			"            standard (3 control planes + workers), large (5 control planes + workers).")
		if o.Preset, err = f.ask("Topology", initflow.PresetStandard, func(s string) error {
			if !slices.Contains(initflow.Presets, s) {
				return fmt.Errorf("%q is not a topology: answer %s", s, strings.Join(initflow.Presets, ", "))
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if !f.given(flagNode) {
		if o.Node, err = f.ask("Address of the first control plane (its console shows it in maintenance mode)", "", isIP); err != nil {
			return err
		}
	}
	if !f.given("endpoint") {
		_, _ = fmt.Fprintln(f.out, "The Kubernetes API endpoint: a VIP Talos shares between the control planes is recommended even for one node,\n"+
			"because changing the endpoint later means re-issuing certificates. Answer the node's own address to use it directly.")
		if o.Endpoint, err = f.ask("API endpoint host", o.Node, func(s string) error {
			if s == "" || strings.ContainsAny(s, " /:") {
				return fmt.Errorf("%q is not a host: answer an IP address or a DNS name", s)
			}
			return nil
		}); err != nil {
			return err
		}
		if o.Endpoint != o.Node && !f.given("endpoint-type") {
			if o.EndpointType, err = f.ask("Endpoint type: vip (Talos shares the address) or loadBalancer (yours)", ichorv1alpha1.EndpointTypeVIP, func(s string) error {
				if s != ichorv1alpha1.EndpointTypeVIP && s != ichorv1alpha1.EndpointTypeLoadBalancer {
					return fmt.Errorf("%q: answer vip or loadBalancer", s)
				}
				return nil
			}); err != nil {
				return err
			}
		}
	}
	if !f.given("install-disk") {
		answer, err := f.ask("Install disk ("+selectorSyntax+", or auto: the node's disk keyed on its most stable attribute)", answerAuto, func(s string) error {
			if s == answerAuto {
				return nil
			}
			_, err := parseDiskSelector(s)
			return err
		})
		if err != nil {
			return err
		}
		if answer != answerAuto {
			sel, _ := parseDiskSelector(answer)
			o.InstallDisk = &sel
		}
	}
	if !f.given("cni-tunnel") {
		if o.Tunnel, err = f.ask("Cilium tunnel protocol (vxlan or geneve; fixed once set)", o.Tunnel, func(s string) error {
			if s != "vxlan" && s != "geneve" {
				return fmt.Errorf("%q: answer vxlan or geneve", s)
			}
			return nil
		}); err != nil {
			return err
		}
	}

	disk := answerAuto
	if o.InstallDisk != nil {
		disk = o.InstallDisk.String()
	}
	endpointType := o.EndpointType
	if endpointType == "" {
		endpointType = ichorv1alpha1.EndpointTypeNode
		if o.Endpoint != o.Node {
			endpointType = ichorv1alpha1.EndpointTypeVIP
		}
	}
	_, _ = fmt.Fprintf(f.out, "\nCluster %s, topology %s, first control plane %s, API endpoint %s (%s), install disk %s, Cilium tunnel %s.\n"+
		"The same without questions: ichor init --cluster %s --preset %s --node %s --endpoint %s --endpoint-type %s --cni-tunnel %s%s\n",
		o.Cluster, o.Preset, o.Node, o.Endpoint, endpointType, disk, o.Tunnel,
		o.Cluster, o.Preset, o.Node, o.Endpoint, endpointType, o.Tunnel, diskFlag(o.InstallDisk))
	answer, err := f.ask("Go on? (yes/no)", "no", func(s string) error {
		if s != answerYes && s != "no" && s != "y" && s != "n" {
			return fmt.Errorf("%q: answer yes or no", s)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if answer != answerYes && answer != "y" {
		return errNotConfirmed
	}
	return nil
}

func diskFlag(sel *ichorv1alpha1.DiskSelector) string {
	if sel == nil {
		return ""
	}
	return " --install-disk " + sel.String()
}

func isIP(s string) error {
	if net.ParseIP(s) == nil {
		return fmt.Errorf("%q is not an IP address", s)
	}
	return nil
}
