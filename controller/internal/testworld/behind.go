package testworld

import (
	"context"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// adminNode is the machine's Talos API with the bundle's os:admin
// certificate, closed when the test ends.
func adminNode(t testing.TB, world *talosemu.World, bun *secrets.Bundle, name string) *talos.Node {
	t.Helper()

	em, err := world.Machine(name)
	testenv.Must(t, err)

	n, err := (&talos.Dialer{}).Dial(context.Background(), em.IP(), bun)
	testenv.Must(t, err)

	t.Cleanup(n.Close)

	return n
}

// ChangeBehindIchor applies a Talos config patch to the machine's running
// configuration directly over its Talos API (no reboot), as a person with
// talosctl would: a difference Ichor did not make. A reboot-requiring
// difference (machine.env of the legacy document, say) is how the tests get
// a rollout that reboots, as no patchable kind needs a reboot under the v1.14
// contract.
func ChangeBehindIchor(t testing.TB, world *talosemu.World, bun *secrets.Bundle, name, patch string) {
	t.Helper()

	ctx := context.Background()
	n := adminNode(t, world, bun, name)

	active, _, err := n.Config(ctx)
	testenv.Must(t, err)

	p, err := configpatcher.LoadPatch([]byte(patch))
	testenv.Must(t, err)

	out, err := configpatcher.Apply(configpatcher.WithBytes(active), []configpatcher.Patch{p})
	testenv.Must(t, err)

	b, err := out.Bytes()
	testenv.Must(t, err)

	_, err = n.Client().ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: b, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	testenv.Must(t, err)
}

// NodeHas reports whether the machine's running configuration has a path
// naming s.
func NodeHas(t testing.TB, world *talosemu.World, bun *secrets.Bundle, name, s string) bool {
	t.Helper()

	active, _, err := adminNode(t, world, bun, name).Config(context.Background())
	testenv.Must(t, err)

	vals, err := render.ConfigValues(active)
	testenv.Must(t, err)

	for p := range vals {
		if strings.Contains(p.String(), s) {
			return true
		}
	}

	return false
}
