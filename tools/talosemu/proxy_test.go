package talosemu_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// TestApidProxy checks apid's request routing (t:internal/app/apid/pkg/director/director.go,
// t:internal/app/apid/pkg/backend/apid.go): a request to endpoint A carrying `node: B` is
// handled by B, with the roles of the caller's certificate; `nodes` fans out and merges the
// replies with metadata.hostname/error per node; workers and bad metadata are refused; a
// maintenance node answers itself.
func TestApidProxy(t *testing.T) {
	spec := testSpec(4)
	w := startWorld(t, spec, "")
	c := getCluster(t)

	cp, w1, w2, maint := w.Machines()[0], w.Machines()[1], w.Machines()[2], w.Machines()[3]

	provision(t, c, cp, c.controlPlane)
	provision(t, c, w1, c.worker)
	provision(t, c, w2, c.worker)
	waitStage(t, maintenanceFactory(maint.IP()), runtime.MachineStageMaintenance)

	cpName, w1Name := hostname(t, c.admin(t, cp.IP())), hostname(t, c.admin(t, w1.IP()))
	if cpName == w1Name {
		t.Fatalf("machines share the hostname %q; the test needs them apart", cpName)
	}

	viaCP := c.admin(t, cp.IP())

	for _, m := range w.Machines() {
		m.ResetRPCCounts()
	}

	const hostnameRPC = "/machine.MachineService/Hostname"

	t.Run("one-to-one", func(t *testing.T) {
		ctx := client.WithNode(t.Context(), w1.IP())

		resp, err := viaCP.MachineClient.Hostname(ctx, &emptypb.Empty{})
		if err != nil {
			t.Fatalf("Hostname via %s for %s: %v", cp.IP(), w1.IP(), err)
		}

		if got := resp.GetMessages()[0].GetHostname(); got != w1Name {
			t.Fatalf("Hostname via the control plane for the worker = %q, want the worker's %q", got, w1Name)
		}

		// one-to-one replies are relayed as they are: no metadata added
		if md := resp.GetMessages()[0].GetMetadata(); md.GetHostname() != "" { //nolint:staticcheck // the field Talos fills
			t.Errorf("one-to-one reply carries metadata.hostname %q; apid adds it only when fanning out", md.GetHostname()) //nolint:staticcheck // the field Talos fills
		}

		if n := w1.RPCCounts()[hostnameRPC]; n != 1 {
			t.Errorf("worker handled %d Hostname calls, want 1", n)
		}

		if n := cp.RPCCounts()[hostnameRPC]; n != 0 {
			t.Errorf("the endpoint handled %d Hostname calls itself, want 0 (it forwards)", n)
		}

		if n := cp.ForwardedCounts()[hostnameRPC]; n != 1 {
			t.Errorf("the endpoint forwarded %d Hostname calls, want 1", n)
		}

		// COSI reads and server streams go the same way
		ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, viaCP.COSI, runtime.MachineStatusID)
		if err != nil || ms.TypedSpec().Stage != runtime.MachineStageRunning {
			t.Fatalf("MachineStatus via the endpoint: %v", err)
		}

		if n := w1.RPCCounts()["/cosi.resource.State/Get"]; n != 1 {
			t.Errorf("worker handled %d COSI Get calls, want 1", n)
		}

		stream, err := viaCP.Logs(ctx, "system", 0, "apid", false, 1)
		if err != nil {
			t.Fatal(err)
		}

		if got := readStream(t, stream); strings.TrimSpace(got) == "" {
			t.Error("Logs via the endpoint returned nothing")
		}

		if n := w1.RPCCounts()["/machine.MachineService/Logs"]; n != 1 {
			t.Errorf("worker handled %d Logs calls, want 1", n)
		}

		// the endpoint itself, named as a node, is reached through its own apid too
		resp, err = viaCP.MachineClient.Hostname(client.WithNode(t.Context(), cp.IP()), &emptypb.Empty{})
		if err != nil || resp.GetMessages()[0].GetHostname() != cpName {
			t.Fatalf("Hostname via the control plane for itself: %v, %v", resp, err)
		}
	})

	t.Run("one-to-many", func(t *testing.T) {
		if err := w2.PowerOff(); err != nil {
			t.Fatal(err)
		}

		ctx := client.WithNodes(t.Context(), cp.IP(), w1.IP(), w2.IP()) //nolint:staticcheck // the deprecated fan-out is what is tested

		resp, err := viaCP.MachineClient.Version(ctx, &emptypb.Empty{})
		if err != nil {
			t.Fatalf("Version fanned out: %v", err)
		}

		byNode := map[string]*machineapi.Version{}
		for _, msg := range resp.GetMessages() {
			byNode[msg.GetMetadata().GetHostname()] = msg //nolint:staticcheck // the field Talos fills
		}

		if len(byNode) != 3 {
			t.Fatalf("replies from %d nodes (%v), want 3", len(byNode), resp.GetMessages())
		}

		for _, ip := range []string{cp.IP(), w1.IP()} {
			msg := byNode[ip]
			if msg.GetMetadata().GetError() != "" || msg.GetVersion().GetTag() == "" { //nolint:staticcheck // the field Talos fills
				t.Errorf("node %s: error %q, version %q; want a version and no error", ip, msg.GetMetadata().GetError(), msg.GetVersion().GetTag()) //nolint:staticcheck // the field Talos fills
			}
		}

		down := byNode[w2.IP()]
		if down.GetMetadata().GetError() == "" || down.GetMetadata().GetStatus().GetCode() != int32(codes.Unavailable) || down.GetVersion() != nil { //nolint:staticcheck // the field Talos fills
			t.Errorf("powered-off node: metadata %v, version %v; want an Unavailable error and no version", down.GetMetadata(), down.GetVersion())
		}

		// the machinery client turns per-node errors into an error naming the node
		if _, err := viaCP.Version(ctx); err == nil || !strings.Contains(err.Error(), w2.IP()) {
			t.Errorf("client.Version fanned out with a node down: %v, want an error naming %s", err, w2.IP())
		}

		// streams fan out too: each message names its node
		stream, err := viaCP.Logs(client.WithNodes(t.Context(), cp.IP(), w1.IP()), "system", 0, "apid", false, 2) //nolint:staticcheck // the deprecated fan-out is what is tested
		if err != nil {
			t.Fatal(err)
		}

		seen := map[string]int{}

		for {
			msg, err := stream.Recv()
			if err != nil {
				break
			}

			seen[msg.GetMetadata().GetHostname()]++ //nolint:staticcheck // the field Talos fills
		}

		if seen[cp.IP()] == 0 || seen[w1.IP()] == 0 {
			t.Errorf("streamed messages per node = %v, want messages from %s and %s", seen, cp.IP(), w1.IP())
		}

		// COSI is not fanned out (director.go lists the services that are)
		_, err = viaCP.COSI.List(ctx, runtime.NewMachineStatus().Metadata())
		wantCode(t, err, codes.InvalidArgument, "one-2-many proxying is not supported for method /cosi.resource.State/List")

		if err := w2.PowerOn(); err != nil {
			t.Fatal(err)
		}

		waitStage(t, c.adminFactory(w2.IP()), runtime.MachineStageRunning)
	})

	t.Run("authorization", func(t *testing.T) {
		// a client certificate from a CA the endpoint does not trust: the handshake fails,
		// nothing is forwarded
		other, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersionCurrent)
		if err != nil {
			t.Fatal(err)
		}

		crt, err := other.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Admin), time.Hour)
		if err != nil {
			t.Fatal(err)
		}

		// trust the endpoint's CA, present a certificate it did not issue
		cfg := clientconfig.NewConfig("other", []string{cp.IP()}, c.bundle.Certs.OS.Crt, crt)

		stranger, err := client.New(t.Context(), client.WithConfig(cfg), client.WithEndpoints(cp.IP()))
		if err != nil {
			t.Fatal(err)
		}
		defer stranger.Close() //nolint:errcheck

		before := w1.RPCCounts()["/machine.MachineService/Reboot"]
		bootsBefore := w1.Info().Boots

		ctx, cancel := context.WithTimeout(client.WithNode(t.Context(), w1.IP()), 5*time.Second)
		defer cancel()

		if _, err := stranger.MachineClient.Reboot(ctx, &machineapi.RebootRequest{}); err == nil {
			t.Fatal("Reboot with an untrusted client certificate succeeded")
		}

		if n := cp.ForwardedCounts()["/machine.MachineService/Reboot"]; n != 0 {
			t.Errorf("the endpoint forwarded %d Reboot calls of an untrusted caller", n)
		}

		if n := w1.RPCCounts()["/machine.MachineService/Reboot"]; n != before || w1.Info().Boots != bootsBefore {
			t.Errorf("the worker received the untrusted Reboot (%d calls, %d boots)", n-before, w1.Info().Boots-bootsBefore)
		}

		// the caller's roles travel with the request: a reader is refused by the target
		reader := c.clientWithRoles(t, cp.IP(), role.Reader)

		_, err = reader.MachineClient.Reboot(client.WithNode(t.Context(), w1.IP()), &machineapi.RebootRequest{})
		wantCode(t, err, codes.PermissionDenied, "not authorized")

		if n := w1.RPCCounts()["/machine.MachineService/Reboot"]; n != before+1 {
			t.Errorf("the worker saw %d Reboot calls of the reader, want 1 (refused there)", n-before)
		}

		if w1.Info().Boots != bootsBefore || w1.Stage() != runtime.MachineStageRunning {
			t.Error("the reader's refused Reboot rebooted the worker")
		}

		// allowed neighbour: the reader reads through the endpoint
		if _, err := reader.MachineClient.Hostname(client.WithNode(t.Context(), w1.IP()), &emptypb.Empty{}); err != nil {
			t.Errorf("reader's Hostname via the endpoint: %v", err)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		// a worker has no client certificate: it forwards nothing
		viaWorker := c.admin(t, w1.IP())
		cpHostnames, cpVersions := cp.RPCCounts()[hostnameRPC], cp.RPCCounts()["/machine.MachineService/Version"]

		_, err := viaWorker.MachineClient.Hostname(client.WithNode(t.Context(), cp.IP()), &emptypb.Empty{})
		wantCode(t, err, codes.PermissionDenied, "no request forwarding")

		if n := cp.RPCCounts()[hostnameRPC] - cpHostnames; n != 0 {
			t.Errorf("the control plane handled %d Hostname calls refused by the worker", n)
		}

		// allowed neighbour: the worker named as its own node answers itself
		resp, err := viaWorker.MachineClient.Hostname(client.WithNode(t.Context(), w1.IP()), &emptypb.Empty{})
		if err != nil || resp.GetMessages()[0].GetHostname() != w1Name {
			t.Errorf("the worker named as its own node: %v, %v", resp, err)
		}

		// a target with a port is not a node name
		_, err = viaCP.MachineClient.Hostname(client.WithNode(t.Context(), w1.Address()), &emptypb.Empty{})
		wantCode(t, err, codes.Internal, "invalid target")

		// maintenance apid runs with node routing disabled: it answers itself
		mcl := maintenanceClient(t, maint.IP())

		v, err := mcl.MachineClient.Version(client.WithNode(t.Context(), cp.IP()), &emptypb.Empty{})
		if err != nil {
			t.Fatalf("Version in maintenance with node metadata: %v", err)
		}

		if v.GetMessages()[0].GetFeatures() != nil || cp.RPCCounts()["/machine.MachineService/Version"] != cpVersions {
			t.Error("a maintenance node forwarded a request; Talos answers it locally")
		}
	})

	t.Run("destructive calls land on the named node", func(t *testing.T) {
		ctx := client.WithNode(t.Context(), w1.IP())

		cpBoots := cp.Info().Boots

		if _, err := viaCP.UpgradeWithOptions(ctx, //nolint:staticcheck // the legacy Upgrade is what older talosctl sends
			client.WithUpgradeImage("ghcr.io/siderolabs/installer:v1.14.2")); err != nil {
			t.Fatalf("Upgrade via the endpoint: %v", err)
		}

		testenv.EventuallyOK(t, 20*time.Second, "worker upgraded", func() (bool, string) {
			info := w1.Info()

			return info.Version == "v1.14.2" && info.Stage == runtime.MachineStageRunning.String(), info.Version + " " + info.Stage
		})

		if info := cp.Info(); info.Version != "v1.14.1" || info.Boots != cpBoots {
			t.Errorf("the endpoint changed: version %s, boots %d→%d", info.Version, cpBoots, info.Boots)
		}

		if n := cp.RPCCounts()["/machine.MachineService/Upgrade"]; n != 0 {
			t.Errorf("the endpoint handled %d Upgrade calls itself", n)
		}

		// reset of the worker through the endpoint: the worker goes to maintenance
		if err := viaCP.ResetGeneric(ctx, &machineapi.ResetRequest{
			Reboot:                 true,
			SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{{Label: constants.StatePartitionLabel, Wipe: true}},
		}); err != nil {
			t.Fatalf("Reset via the endpoint: %v", err)
		}

		waitStage(t, maintenanceFactory(w1.IP()), runtime.MachineStageMaintenance)

		if cp.Stage() != runtime.MachineStageRunning || cp.Info().Maintenance || cp.Info().Boots != cpBoots {
			t.Errorf("the endpoint was reset or rebooted: %+v", cp.Info())
		}

		if n := w1.RPCCounts()["/machine.MachineService/Reset"]; n != 1 {
			t.Errorf("the worker handled %d Reset calls, want 1", n)
		}
	})
}
