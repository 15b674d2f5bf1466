package talosemu_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// etcdState is the etcd service's state in ServiceList.
func etcdState(ctx context.Context, cl *client.Client) (string, error) {
	resp, err := cl.ServiceList(ctx)
	if err != nil {
		return "", err
	}

	for _, s := range resp.GetMessages()[0].GetServices() {
		if s.GetId() == "etcd" {
			return s.GetState(), nil
		}
	}

	return "", fmt.Errorf("no etcd service")
}

// recoveryReset is the reset of Talos's recovery procedure
// (`talosctl reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL`).
func recoveryReset() *machineapi.ResetRequest {
	return &machineapi.ResetRequest{Reboot: true, SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{
		{Label: constants.EphemeralPartitionLabel, Wipe: true},
	}}
}

// TestEtcdLiveRestore runs Talos's recovery procedure on a live three-member
// etcd (t:website/content/v1.10/advanced/disaster-recovery.md): a snapshot,
// a key written after it, EPHEMERAL wiped on every control plane (each comes
// back with its etcd service Preparing; cp-1, reset first and alone, comes
// back while the others' old members still run, joins them, and once they go
// shows Running without serving: it is reset again), EtcdRecover and
// Bootstrap{recover_etcd} on one, the others join: three voting members that
// hold the key written before the snapshot and not the one written after.
func TestEtcdLiveRestore(t *testing.T) {
	spec := testSpec(3)
	w := startWorld(t, spec, "")
	cps := w.Machines()

	c := newRealCluster(t, cps[0].IP(), nil)
	c.provisionAll(t, cps, nil)

	admins := make([]*client.Client, len(cps))
	for i, m := range cps {
		admins[i] = c.admin(t, m.IP())
	}

	if _, err := admins[0].MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{}); err != nil {
		t.Fatalf("Bootstrap: %v", err)
	}

	waitVoters(t, admins[0], 3, 90*time.Second)

	kv := etcdClientFor(t, c.bundle, cps[1].IP())
	if _, err := kv.Put(t.Context(), "/registry/before", "kept"); err != nil {
		t.Fatal(err)
	}

	snap := snapshot(t, admins[1])

	if _, err := kv.Put(t.Context(), "/registry/after", "lost"); err != nil {
		t.Fatal(err)
	}

	// Bootstrap needs an empty data directory: a running member refuses it.
	_, err := admins[0].MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{RecoverEtcd: true})
	wantCode(t, err, codes.AlreadyExists, "etcd data directory is not empty")

	boots := make([]string, len(cps))
	for i, m := range cps {
		boots[i] = m.Info().BootID
	}

	resetAll := func(idx []int) {
		var wg sync.WaitGroup

		for _, i := range idx {
			boots[i] = cps[i].Info().BootID

			wg.Go(func() {
				if _, err := admins[i].MachineClient.Reset(context.Background(), recoveryReset()); err != nil {
					t.Errorf("Reset %s: %v", cps[i].Name(), err)
				}
			})
		}

		wg.Wait()
	}

	// cp-1 first, alone: it comes back while the others' members still run,
	// and joins them (Talos's etcd pre-step joins any member it finds).
	resetAll([]int{0})

	testenv.EventuallyOK(t, 90*time.Second, "cp-1 back and joined to the old members", func() (bool, string) {
		info := cps[0].Info()
		if info.BootID == boots[0] || info.Stage != runtime.MachineStageRunning.String() {
			return false, fmt.Sprintf("%+v", info)
		}

		st, err := etcdState(t.Context(), c.admin(t, cps[0].IP()))

		return err == nil && st == "Running", fmt.Sprint(st, err)
	})
	waitVoters(t, admins[1], 3, 90*time.Second)

	// Then the others: cp-1's member is left without a quorum.
	resetAll([]int{1, 2})

	// Every control plane comes back configured; one whose etcd runs joined
	// an old member before it went down, and is reset again.
	for round := 0; ; round++ {
		var joined []int

		for i, m := range cps {
			testenv.EventuallyOK(t, 90*time.Second, m.Name()+" back on a new boot", func() (bool, string) {
				info := m.Info()

				return info.BootID != boots[i] && info.Stage == runtime.MachineStageRunning.String(), fmt.Sprintf("%+v", info)
			})
		}

		for i, m := range cps {
			var state string

			testenv.EventuallyOK(t, 30*time.Second, m.Name()+" etcd service", func() (bool, string) {
				var err error

				state, err = etcdState(t.Context(), c.admin(t, m.IP()))

				return err == nil, fmt.Sprint(err)
			})

			if state != "Preparing" {
				joined = append(joined, i)
			}
		}

		// cp-1 joined the old members, which then went away; another node
		// may have joined too when its reset came later than a peer's return
		// (the emulator reboots in 100 ms).
		if round == 0 && !slices.Contains(joined, 0) {
			t.Fatalf("after the resets, etcd runs on %v; want cp-1 among them (it joined the old members, which then went away)", joined)
		}

		if len(joined) == 0 {
			break
		}

		if round == 4 {
			t.Fatalf("etcd still runs on %v after %d rounds of resets", joined, round+1)
		}

		t.Logf("round %d: %v joined an old member; reset again", round, joined)

		for _, i := range joined {
			admins[i] = c.admin(t, cps[i].IP())
		}

		resetAll(joined)
	}

	for i, m := range cps {
		admins[i] = c.admin(t, m.IP())

		_, err := admins[i].MachineClient.EtcdStatus(t.Context(), &emptypb.Empty{})
		wantCode(t, err, codes.Unavailable, "")
	}

	if err := recoverUpload(t.Context(), admins[0], snap); err != nil {
		t.Fatalf("EtcdRecover: %v", err)
	}

	if _, err := admins[0].MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatalf("Bootstrap{recover_etcd}: %v", err)
	}

	waitVoters(t, admins[0], 3, 90*time.Second)

	for _, m := range cps {
		if got := string(etcdGet(t, c, m.IP(), "/registry/before")); got != "kept" {
			t.Errorf("%s: /registry/before = %q, want kept", m.Name(), got)
		}

		if got := etcdGet(t, c, m.IP(), "/registry/after"); got != nil {
			t.Errorf("%s: /registry/after = %q: a key written after the snapshot survived the restore", m.Name(), got)
		}

		if st, err := etcdState(t.Context(), c.admin(t, m.IP())); err != nil || st != "Running" {
			t.Errorf("%s: etcd service %q (%v)", m.Name(), st, err)
		}
	}
}
