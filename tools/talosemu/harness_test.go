package talosemu_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// Environment for running the conformance suite against a real Talos node.
const (
	envEndpoint    = "TALOS_CONFORMANCE_ENDPOINT"    // a configured node, host or host:port
	envTalosconfig = "TALOS_CONFORMANCE_TALOSCONFIG" // its admin talosconfig (default $TALOSCONFIG)
	envMaintenance = "TALOS_CONFORMANCE_MAINTENANCE" // a node in maintenance mode, host or host:port
)

var subnetCounter atomic.Int32

// subnetOctet is the second octet of this process's test subnets, 127.100–127.199 by process
// ID, so that two test processes running at once (two worktrees, two packages) do not take the
// same addresses; the other packages' tests use 127.0.x and 127.77.x.
var subnetOctet = 100 + os.Getpid()%100

// testSpec returns a spec of n machines on a subnet no other test of this process uses, with
// short durations.
func testSpec(n int) *talosemu.Spec {
	x := 100 + subnetCounter.Add(1)%150

	spec, err := talosemu.GenerateSpec(n, 0, fmt.Sprintf("127.%d.%d.0/24", subnetOctet, x))
	if err != nil {
		panic(err)
	}

	spec.Durations = fastDurations()

	return spec
}

func fastDurations() talosemu.Durations {
	return talosemu.Durations{
		Install: talosemu.Duration(100 * time.Millisecond),
		Reboot:  talosemu.Duration(100 * time.Millisecond),
		Boot:    talosemu.Duration(50 * time.Millisecond),
	}
}

func startWorld(t testing.TB, spec *talosemu.Spec, dir string) *talosemu.World {
	t.Helper()

	if dir == "" {
		dir = t.TempDir()
	}

	w, err := talosemu.Start(t.Context(), spec, dir, testOptions())
	if err != nil {
		t.Fatalf("starting emulator: %v", err)
	}

	t.Cleanup(w.Close)

	return w
}

// testOptions logs machine events to stderr when TALOSEMU_TEST_LOG is set.
func testOptions() talosemu.Options {
	var opt talosemu.Options

	if os.Getenv("TALOSEMU_TEST_LOG") != "" {
		opt.Logger = log.New(os.Stderr, "talosemu: ", log.Lmicroseconds)
	}

	return opt
}

// cluster holds secrets and generated configs shared by the tests (generating a bundle takes
// a moment).
type cluster struct {
	bundle       *secrets.Bundle
	input        *generate.Input
	controlPlane []byte
	worker       []byte
	talosconfig  *clientconfig.Config
}

var (
	clusterOnce sync.Once
	testCluster *cluster
	clusterErr  error
)

func getCluster(t testing.TB) *cluster {
	t.Helper()

	clusterOnce.Do(func() {
		testCluster, clusterErr = newCluster()
	})

	if clusterErr != nil {
		t.Fatalf("generating cluster secrets: %v", clusterErr)
	}

	return testCluster
}

func newCluster() (*cluster, error) {
	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersionCurrent)
	if err != nil {
		return nil, err
	}

	in, err := generate.NewInput("emu", "https://127.0.0.1:6443", "1.37.0",
		generate.WithSecretsBundle(bundle),
		generate.WithInstallDisk("/dev/nvme0n1"),
	)
	if err != nil {
		return nil, err
	}

	c := &cluster{bundle: bundle, input: in}

	for _, typ := range []machine.Type{machine.TypeControlPlane, machine.TypeWorker} {
		cfg, err := in.Config(typ)
		if err != nil {
			return nil, err
		}

		b, err := cfg.Bytes()
		if err != nil {
			return nil, err
		}

		if typ == machine.TypeControlPlane {
			c.controlPlane = b
		} else {
			c.worker = b
		}
	}

	c.talosconfig, err = in.Talosconfig()

	return c, err
}

// clientWithRoles builds a talosconfig holding a client certificate for roles.
func (c *cluster) clientWithRoles(t testing.TB, endpoint string, roles ...role.Role) *client.Client {
	t.Helper()

	crt, err := c.bundle.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(roles...), time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	cfg := clientconfig.NewConfig("emu", []string{endpoint}, c.bundle.Certs.OS.Crt, crt)

	cl, err := client.New(t.Context(), client.WithConfig(cfg), client.WithEndpoints(endpoint))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = cl.Close() })

	return cl
}

func (c *cluster) admin(t testing.TB, endpoint string) *client.Client {
	t.Helper()

	cl, err := client.New(t.Context(), client.WithConfig(c.talosconfig), client.WithEndpoints(endpoint))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = cl.Close() })

	return cl
}

func maintenanceClient(t testing.TB, endpoint string, fingerprints ...string) *client.Client {
	t.Helper()

	cl, err := client.New(t.Context(), client.WithMaintenanceMode(endpoint, fingerprints), client.WithDefaultGRPCDialOptions())
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = cl.Close() })

	return cl
}

// waitStage waits until the machine's MachineStatus, read through a fresh client from mk,
// reports stage.
func waitStage(t testing.TB, mk func() (*client.Client, error), stage runtime.MachineStage) {
	t.Helper()

	testenv.EventuallyOK(t, 20*time.Second, "stage "+stage.String(), func() (bool, string) {
		cl, err := mk()
		if err != nil {
			return false, err.Error()
		}
		defer cl.Close() //nolint:errcheck

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()

		ms, err := safe.StateGetByID[*runtime.MachineStatus](ctx, cl.COSI, runtime.MachineStatusID)
		if err != nil {
			return false, err.Error()
		}

		return ms.TypedSpec().Stage == stage, ms.TypedSpec().Stage.String()
	})
}

func (c *cluster) adminFactory(endpoint string) func() (*client.Client, error) {
	return func() (*client.Client, error) {
		return client.New(context.Background(), client.WithConfig(c.talosconfig), client.WithEndpoints(endpoint))
	}
}

func maintenanceFactory(endpoint string) func() (*client.Client, error) {
	return func() (*client.Client, error) {
		return client.New(context.Background(), client.WithMaintenanceMode(endpoint, nil), client.WithDefaultGRPCDialOptions())
	}
}

// control calls the control API and decodes the JSON reply into out (when not nil).
func control(t testing.TB, w *talosemu.World, method, path, body string, out any) int {
	t.Helper()

	req, err := http.NewRequestWithContext(t.Context(), method, w.ControlURL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}

	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() //nolint:errcheck

	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}

	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("control API %s %s: %v (body %s)", method, path, err, b)
		}
	}

	return resp.StatusCode
}

// provision applies the cluster's config of kind to a maintenance machine and waits until it
// runs.
func provision(t testing.TB, c *cluster, m *talosemu.Machine, data []byte) {
	t.Helper()

	cl := maintenanceClient(t, m.IP())

	if _, err := cl.ApplyConfiguration(t.Context(), applyRequest(data)); err != nil {
		t.Fatalf("apply in maintenance: %v", err)
	}

	waitStage(t, c.adminFactory(m.IP()), runtime.MachineStageRunning)
}

func realEndpoint(t *testing.T) string {
	t.Helper()

	ep := os.Getenv(envEndpoint)
	if ep == "" {
		t.Skipf("real-node variant skipped: set %s (and %s) to run it against a real Talos node", envEndpoint, envTalosconfig)
	}

	return ep
}

func applyRequest(data []byte) *machineapi.ApplyConfigurationRequest {
	return &machineapi.ApplyConfigurationRequest{Data: data, Mode: machineapi.ApplyConfigurationRequest_AUTO}
}
