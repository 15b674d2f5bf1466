package talosemu_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
)

// The node inspection reads ichor-ui makes with an os:reader certificate.
func init() {
	checks = append(checks,
		check{
			name: "inspect/ServiceList", needs: needsConfigured,
			cite: "t:internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go ServiceList; rules table: AOR",
			run: func(t *testing.T, tg *target) {
				resp, err := tg.admin(t).ServiceList(t.Context())
				if err != nil {
					t.Fatal(err)
				}

				byID := map[string]*machineapi.ServiceInfo{}
				for _, s := range resp.GetMessages()[0].GetServices() {
					byID[s.GetId()] = s
				}

				for _, id := range []string{"apid", "machined", "kubelet", "containerd"} {
					s, ok := byID[id]
					if !ok {
						t.Fatalf("service %s missing from %v", id, keys(byID))
					}

					if s.GetState() != "Running" || len(s.GetEvents().GetEvents()) == 0 || s.GetEvents().GetEvents()[0].GetTs() == nil {
						t.Fatalf("service %s: state %q, events %v", id, s.GetState(), s.GetEvents())
					}
				}

				if tg.machine == nil {
					return
				}

				// the emulated machine is a control plane that was never bootstrapped
				etcd, ok := byID["etcd"]
				if !ok || etcd.GetState() != "Preparing" || etcd.GetHealth().GetHealthy() {
					t.Fatalf("etcd before bootstrap: %v", etcd)
				}

				if !byID["apid"].GetHealth().GetHealthy() || !byID["machined"].GetHealth().GetUnknown() {
					t.Fatalf("health: apid %v, machined %v", byID["apid"].GetHealth(), byID["machined"].GetHealth())
				}
			},
		},
		check{
			name: "inspect/Logs-tail-follow-stable", needs: needsConfigured,
			cite: "t:…/v1alpha1_server.go Logs (tail_lines, follow); service logs are ring buffers",
			run: func(t *testing.T, tg *target) {
				admin := tg.admin(t)
				ctx := t.Context()

				first := logLines(t, admin, "apid", 4)
				if len(first) != 4 {
					t.Fatalf("tail 4: %d lines: %q", len(first), first)
				}

				if tg.machine == nil {
					return
				}

				// a second read has the same lines (the log does not change under a reader)
				all := logLines(t, admin, "apid", -1)
				for _, l := range first {
					if !slices.Contains(all, l) {
						t.Fatalf("line %q of the first read is not in the second read", l)
					}
				}

				// an unknown service has an empty log
				if got := logLines(t, admin, "no-such-service", 10); len(got) != 0 {
					t.Fatalf("unknown service: %q", got)
				}

				// follow sends lines logged after the stream opened
				fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()

				stream, err := admin.Logs(fctx, "system", 0, "apid", true, 1)
				if err != nil {
					t.Fatal(err)
				}

				var got []string

				for len(got) < 3 {
					msg, err := stream.Recv()
					if err != nil {
						t.Fatalf("follow ended after %q: %v", got, err)
					}

					got = append(got, strings.TrimSuffix(string(msg.GetBytes()), "\n"))
				}

				if got[0] == got[1] || got[1] == got[2] || !strings.Contains(got[2], "heartbeat") {
					t.Fatalf("follow lines: %q", got)
				}
			},
		},
		check{
			name: "inspect/reader-reads-disks-links-addresses", needs: emulatorOnly,
			cite: "t:internal/app/resources/access.go (non-sensitive types readable by os:reader); m:resources/network/address_status.go",
			run: func(t *testing.T, tg *target) {
				reader := tg.cluster.clientWithRoles(t, tg.endpoint, role.Reader)
				ctx := t.Context()

				disks, err := safe.StateListAll[*block.Disk](ctx, reader.COSI)
				if err != nil || disks.Len() == 0 {
					t.Fatalf("reader Disk list: %d, %v", disks.Len(), err)
				}

				links, err := safe.StateListAll[*network.LinkStatus](ctx, reader.COSI)
				if err != nil || links.Len() == 0 {
					t.Fatalf("reader LinkStatus list: %v", err)
				}

				addrs, err := safe.StateListAll[*network.AddressStatus](ctx, reader.COSI)
				if err != nil {
					t.Fatal(err)
				}

				want := netip.MustParseAddr(tg.machine.IP())
				found := false

				for a := range addrs.All() {
					if a.TypedSpec().Address.Addr() == want && a.TypedSpec().LinkName == links.Get(0).Metadata().ID() {
						found = true
					}
				}

				if !found {
					t.Fatalf("no AddressStatus for %s on %s", want, links.Get(0).Metadata().ID())
				}

				if _, err := reader.ServiceList(ctx); err != nil {
					t.Fatalf("reader ServiceList: %v", err)
				}

				if got := logLines(t, reader, "machined", 2); len(got) != 2 {
					t.Fatalf("reader Logs: %q", got)
				}

				dm, err := reader.Dmesg(ctx, false, false)
				if err != nil {
					t.Fatal(err)
				}

				if text := readStream(t, dm); !strings.Contains(text, "Linux version") {
					t.Fatalf("reader Dmesg: %q", firstLines(text, 3))
				}

				// and nothing that changes the node
				wantCode(t, reader.Reboot(ctx), codes.PermissionDenied, "not authorized")
				_, err = reader.ServiceRestart(ctx, "kubelet")
				wantCode(t, err, codes.PermissionDenied, "not authorized")
			},
		},
	)
}

func logLines(t *testing.T, c *client.Client, id string, tail int32) []string {
	t.Helper()

	stream, err := c.Logs(t.Context(), "system", 0, id, false, tail)
	if err != nil {
		t.Fatal(err)
	}

	text := strings.TrimSuffix(readStream(t, stream), "\n")
	if text == "" {
		return nil
	}

	return strings.Split(text, "\n")
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}

	slices.Sort(out)

	return out
}
