package commands

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/maeshinshin/ichor/cli/internal/initflow"
)

func runForm(t *testing.T, answers string, given ...string) (initflow.Options, string, error) {
	t.Helper()
	o := initflow.Options{Cluster: "ichor", Tunnel: "vxlan"}
	var out bytes.Buffer
	f := &form{in: bufio.NewReader(strings.NewReader(answers)), out: &out, given: func(name string) bool {
		for _, g := range given {
			if g == name {
				return true
			}
		}
		return false
	}}
	err := f.fill(&o)
	return o, out.String(), err
}

// TestInitFormAsksAgainAndSummarises: wrong answers are explained and asked
// again, defaults apply to empty lines, and the summary gives the flags.
func TestInitFormAsksAgainAndSummarises(t *testing.T) {
	answers := strings.Join([]string{
		"Prod_1", "prod", // a bad cluster name, then a good one
		"huge", "", // a bad topology, then the default (standard)
		"node-1", "10.5.0.2", // not an IP, then an IP
		"10.5.0.10",               // a VIP
		"",                        // endpoint type: the default vip
		"size=100", "serial=S3Z9", // a bad disk selector, then a serial
		"", // the tunnel: vxlan
		"yes",
	}, "\n") + "\n"
	o, out, err := runForm(t, answers)
	if err != nil {
		t.Fatalf("form: %v\n%s", err, out)
	}
	if o.Cluster != "prod" || o.Preset != initflow.PresetStandard || o.Node != "10.5.0.2" || o.Endpoint != "10.5.0.10" ||
		o.EndpointType != "vip" || o.InstallDisk == nil || o.InstallDisk.Serial != "S3Z9" || o.Tunnel != "vxlan" {
		t.Fatalf("options: %+v", o)
	}
	for _, want := range []string{
		"not a valid IchorUser name", `"huge" is not a topology`, `"node-1" is not an IP address`, `"size" is not a disk attribute`,
		"ichor init --cluster prod --preset standard --node 10.5.0.2 --endpoint 10.5.0.10 --endpoint-type vip --cni-tunnel vxlan --install-disk serial=S3Z9",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the form's output lacks %q:\n%s", want, out)
		}
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("the form's answers do not validate: %v", err)
	}
}

// TestInitFormSkipsGivenFlagsAndCanBeDeclined: flags are not asked again,
// "no" (the default) ends init with nothing changed, and three bad answers
// in a row give up.
func TestInitFormSkipsGivenFlagsAndCanBeDeclined(t *testing.T) {
	_, out, err := runForm(t, "10.5.0.2\n\n\n\n\n", flagCluster, "preset")
	if !errors.Is(err, errNotConfirmed) {
		t.Fatalf("declined form: %v\n%s", err, out)
	}
	if strings.Contains(out, "Cluster name") || strings.Contains(out, "Topology [") {
		t.Fatalf("the form asked for a given flag:\n%s", out)
	}
	if _, _, err := runForm(t, "X_1\nY_2\nZ_3\n"); err == nil || !strings.Contains(err.Error(), "after 3 tries") {
		t.Fatalf("three bad names: %v", err)
	}
	if _, _, err := runForm(t, ""); err == nil || !strings.Contains(err.Error(), "standard input") {
		t.Fatalf("no input: %v", err)
	}
}

// TestInitWithoutPresetOffTerminal: without a terminal and without
// --interactive, a missing --preset is an error that names the way out.
func TestInitWithoutPresetOffTerminal(t *testing.T) {
	app := New()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	err := app.Run(context.Background(), []string{"ichor", "init", "--node", "127.0.0.1"})
	if err == nil || !strings.Contains(err.Error(), "--preset is missing") || !strings.Contains(err.Error(), "--interactive") {
		t.Fatalf("init without --preset: %v", err)
	}
	// --interactive reads the answers from standard input, and "no" changes nothing.
	app = New()
	app.Writer, app.ErrWriter, app.Reader = &out, &errOut, strings.NewReader("standard\n\n\n\nno\n")
	err = app.Run(context.Background(), []string{"ichor", "init", "--node", "127.0.0.1", "--interactive"})
	if !errors.Is(err, errNotConfirmed) {
		t.Fatalf("init --interactive answered no: %v\n%s", err, errOut.String())
	}
}
