package talosemu_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/emptypb"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// etcdChecks are the part-2 checks: the etcd RPCs act on a real member, Kubeconfig renders
// Talos's archive. They bootstrap or reset the node, so they run on the emulator only.
var etcdChecks = []check{
	{
		name: "etcd/controlplane-only-on-worker", needs: emulatorOnly, worker: true,
		cite: "t:internal/app/internal/machinehelper/machinehelper.go (CheckControlplane) for Bootstrap, etcd RPCs (EtcdDowngrade* included) and Kubeconfig",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)
			ctx := t.Context()

			_, err := admin.MachineClient.Bootstrap(ctx, &machineapi.BootstrapRequest{})
			wantCode(t, err, codes.Unimplemented, "")

			_, err = admin.MachineClient.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{})
			wantCode(t, err, codes.Unimplemented, "")

			_, err = admin.MachineClient.EtcdStatus(ctx, &emptypb.Empty{})
			wantCode(t, err, codes.Unimplemented, "")

			_, err = admin.Kubeconfig(ctx)
			wantCode(t, err, codes.Unimplemented, "")

			_, err = admin.MachineClient.EtcdDowngradeValidate(ctx, &machineapi.EtcdDowngradeValidateRequest{Version: "3.6"})
			wantCode(t, err, codes.Unimplemented, "etcd downgrade validate is only available on control plane nodes")

			_, err = admin.MachineClient.EtcdDowngradeEnable(ctx, &machineapi.EtcdDowngradeEnableRequest{Version: "3.6"})
			wantCode(t, err, codes.Unimplemented, "etcd downgrade enable is only available on control plane nodes")

			_, err = admin.MachineClient.EtcdDowngradeCancel(ctx, &emptypb.Empty{})
			wantCode(t, err, codes.Unimplemented, "etcd downgrade cancel is only available on control plane nodes")
		},
	},
	{
		name: "etcd/Bootstrap-and-member-RPCs", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go Bootstrap (AlreadyExists when the data directory is not empty); t:…/v1alpha1_server.go EtcdMemberList (query_local), EtcdStatus, EtcdRemoveMemberByID (NotFound), EtcdForfeitLeadership, EtcdAlarmList/Disarm, EtcdDefragment",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)
			ctx := t.Context()

			_, err := admin.MachineClient.EtcdStatus(ctx, &emptypb.Empty{})
			wantCode(t, err, codes.Unavailable, "etcd service is not running")

			if _, err := admin.MachineClient.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
				t.Fatalf("Bootstrap: %v", err)
			}

			_, err = admin.MachineClient.Bootstrap(ctx, &machineapi.BootstrapRequest{})
			wantCode(t, err, codes.AlreadyExists, "etcd data directory is not empty")

			v, err := memberList(ctx, admin)
			if err != nil {
				t.Fatal(err)
			}

			if len(v.names) != 1 || v.names[0] != hostnameOf(t, admin) || v.learners != 0 {
				t.Fatalf("members %+v, want the node's hostname as the only voting member", v)
			}

			// query_local asks the local member only; the answer is the same single member
			local, err := admin.MachineClient.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{QueryLocal: true})
			if err != nil {
				t.Fatalf("EtcdMemberList{query_local}: %v", err)
			}

			if lm := local.GetMessages()[0]; len(lm.GetMembers()) != 1 || lm.GetMembers()[0].GetId() != v.ids[0] ||
				len(lm.GetLegacyMembers()) != 1 || lm.GetLegacyMembers()[0] != v.names[0] ||
				len(lm.GetMembers()[0].GetPeerUrls()) != 1 || !strings.HasSuffix(lm.GetMembers()[0].GetPeerUrls()[0], ":2380") {
				t.Fatalf("EtcdMemberList{query_local}: %v", lm)
			}

			st, err := admin.MachineClient.EtcdStatus(ctx, &emptypb.Empty{})
			if err != nil {
				t.Fatal(err)
			}

			ms := st.GetMessages()[0].GetMemberStatus()
			if ms.GetMemberId() != v.ids[0] || ms.GetLeader() != ms.GetMemberId() || ms.GetIsLearner() || ms.GetDbSize() == 0 {
				t.Fatalf("EtcdStatus %+v", ms)
			}

			_, err = admin.MachineClient.EtcdRemoveMemberByID(ctx, &machineapi.EtcdRemoveMemberByIDRequest{MemberId: v.ids[0] + 1})
			wantCode(t, err, codes.NotFound, "member not found")

			// the only member has nobody to hand the leadership to
			fr, err := admin.MachineClient.EtcdForfeitLeadership(ctx, &machineapi.EtcdForfeitLeadershipRequest{})
			if err != nil || fr.GetMessages()[0].GetMember() != "" {
				t.Fatalf("EtcdForfeitLeadership on a single member: %v %v", fr, err)
			}

			// no alarms on a healthy member; defragmentation of the real backend works
			al, err := admin.MachineClient.EtcdAlarmList(ctx, &emptypb.Empty{})
			if err != nil || len(al.GetMessages()[0].GetMemberAlarms()) != 0 {
				t.Fatalf("EtcdAlarmList: %v %v", al, err)
			}

			if _, err := admin.MachineClient.EtcdDefragment(ctx, &emptypb.Empty{}); err != nil {
				t.Fatalf("EtcdDefragment: %v", err)
			}

			if _, err := admin.MachineClient.EtcdAlarmDisarm(ctx, &emptypb.Empty{}); err != nil {
				t.Fatalf("EtcdAlarmDisarm: %v", err)
			}

			// readers may list members but not remove them
			reader := tg.cluster.clientWithRoles(t, tg.endpoint, "os:reader")

			if _, err := memberList(ctx, reader); err != nil {
				t.Fatalf("EtcdMemberList as os:reader: %v", err)
			}

			_, err = reader.MachineClient.EtcdRemoveMemberByID(ctx, &machineapi.EtcdRemoveMemberByIDRequest{MemberId: v.ids[0]})
			wantCode(t, err, codes.PermissionDenied, "not authorized")
		},
	},
	{
		name: "etcd/Downgrade-Validate-Enable-Cancel", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go EtcdDowngradeValidate, EtcdDowngradeEnable, EtcdDowngradeCancel, validateDowngrade (MAJOR.MINOR, >= 3.5, then the local member's Maintenance.Downgrade; its error wrapped without a status, so Unknown)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)
			ctx := t.Context()
			mc := admin.MachineClient

			validate := func(v string) (*machineapi.EtcdDowngradeValidateResponse, error) {
				return mc.EtcdDowngradeValidate(ctx, &machineapi.EtcdDowngradeValidateRequest{Version: v})
			}

			// the version is checked before etcd is asked, so also before the member runs
			_, err := validate("3.4")
			wantCode(t, err, codes.InvalidArgument, "etcd downgrade is only supported to 3.5 and later versions")

			_, err = validate("3.6")
			wantCode(t, err, codes.Unavailable, "etcd service is not running")

			if _, err := mc.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
				t.Fatalf("Bootstrap: %v", err)
			}

			for v, msg := range map[string]string{
				"":      "version is required for etcd downgrade",
				"3":     "version should be in MAJOR.MINOR format",
				"3.6.0": "version should be in MAJOR.MINOR format",
				"v3.6":  "major version should be a number",
				"3.x":   "minor version should be a number",
				"2.9":   "etcd downgrade is only supported to 3.5 and later versions",
			} {
				_, err = validate(v)
				wantCode(t, err, codes.InvalidArgument, msg)

				_, err = mc.EtcdDowngradeEnable(ctx, &machineapi.EtcdDowngradeEnableRequest{Version: v})
				wantCode(t, err, codes.InvalidArgument, msg)
			}

			// the member (etcd v3.7) allows exactly one minor version down; right after the
			// bootstrap it may not have decided the cluster version yet (etcd answers
			// "cluster version not found during downgrade")
			testenv.EventuallyOK(t, 30*time.Second, "EtcdDowngradeValidate 3.6 answers cluster version 3.7", func() (bool, string) {
				resp, err := validate("3.6")
				if err != nil {
					if codeOf(err) != codes.Unknown || !strings.Contains(err.Error(), "cluster version not found") {
						t.Fatalf("EtcdDowngradeValidate 3.6: %v", err)
					}

					return false, err.Error()
				}

				cv := resp.GetMessages()[0].GetClusterDowngrade().GetClusterVersion()

				return cv == "3.7", cv
			})

			for _, v := range []string{"3.5", "3.7", "3.8"} {
				_, err = validate(v)
				wantCode(t, err, codes.Unknown, "failed to query etcd status: etcdserver: invalid downgrade target version")
			}

			_, err = mc.EtcdDowngradeEnable(ctx, &machineapi.EtcdDowngradeEnableRequest{Version: "3.5"})
			wantCode(t, err, codes.Unknown, "etcdserver: invalid downgrade target version")

			// readers and operators may not downgrade
			reader := tg.cluster.clientWithRoles(t, tg.endpoint, "os:operator")

			_, err = reader.MachineClient.EtcdDowngradeEnable(ctx, &machineapi.EtcdDowngradeEnableRequest{Version: "3.6"})
			wantCode(t, err, codes.PermissionDenied, "not authorized")

			en, err := mc.EtcdDowngradeEnable(ctx, &machineapi.EtcdDowngradeEnableRequest{Version: "3.6"})
			if err != nil {
				t.Fatalf("EtcdDowngradeEnable 3.6: %v", err)
			}

			if cv := en.GetMessages()[0].GetClusterDowngrade().GetClusterVersion(); cv != "3.7" {
				t.Fatalf("cluster version answered by enable %q, want 3.7", cv)
			}

			// the leader lowers the cluster and storage version to the target; a second
			// downgrade is refused while this one is in progress
			testenv.EventuallyOK(t, 30*time.Second, "storage version 3.6 after the downgrade is enabled", func() (bool, string) {
				st, err := mc.EtcdStatus(ctx, &emptypb.Empty{})
				if err != nil {
					return false, err.Error()
				}

				ms := st.GetMessages()[0].GetMemberStatus()

				return ms.GetStorageVersion() == "3.6.0", ms.GetStorageVersion() + " " + ms.GetProtocolVersion()
			})

			_, err = validate("3.5")
			wantCode(t, err, codes.Unknown, "etcdserver: cluster has a downgrade job in progress")

			if _, err := mc.EtcdDowngradeCancel(ctx, &emptypb.Empty{}); err != nil {
				t.Fatalf("EtcdDowngradeCancel: %v", err)
			}

			// cancelled: the cluster version goes back to the members' version and 3.6 is a
			// valid target again
			testenv.EventuallyOK(t, 30*time.Second, "cluster version 3.7 after the cancel", func() (bool, string) {
				resp, err := validate("3.6")
				if err != nil {
					return false, err.Error()
				}

				cv := resp.GetMessages()[0].GetClusterDowngrade().GetClusterVersion()

				return cv == "3.7", cv
			})

			// etcd answers a cancel without a downgrade in progress with the cluster version
			cr, err := mc.EtcdDowngradeCancel(ctx, &emptypb.Empty{})
			if err != nil || cr.GetMessages()[0].GetClusterDowngrade().GetClusterVersion() != "3.7" {
				t.Fatalf("EtcdDowngradeCancel without a downgrade: %v %v", cr, err)
			}
		},
	},
	{
		name: "etcd/Snapshot-Recover", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go EtcdSnapshot, EtcdRecover; t:internal/app/machined/pkg/system/services/etcd.go (recover from snapshot on Bootstrap{recover_etcd}, recover_skip_hash_check)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)
			ctx := t.Context()

			if _, err := admin.MachineClient.Bootstrap(ctx, &machineapi.BootstrapRequest{}); err != nil {
				t.Fatalf("Bootstrap: %v", err)
			}

			ec := etcdClientFor(t, tg.cluster.bundle, tg.endpoint)

			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := ec.Put(pctx, "/emu/before", "snapshot")

			cancel()

			if err != nil {
				t.Fatal(err)
			}

			snap := snapshot(t, admin)

			// bbolt's meta page magic 0xED0CDAED at offset 32 (page header 16 + root 16)
			if len(snap) < 4096 || !bytes.Contains(snap[:4096], []byte{0xed, 0xda, 0x0c, 0xed}) {
				t.Fatalf("snapshot (%d bytes) is not a bbolt database", len(snap))
			}

			// wiping EPHEMERAL removes the etcd data; the member is gone after the reboot
			resetEphemeral(t, tg)

			admin = tg.admin(t)

			_, err = admin.MachineClient.EtcdStatus(ctx, &emptypb.Empty{})
			wantCode(t, err, codes.Unavailable, "")

			// a copy of the database without etcd's trailing sha256 (what copying member/snap/db
			// gives) restores only with recover_skip_hash_check
			if err := recoverUpload(ctx, admin, snap[:len(snap)-32]); err != nil {
				t.Fatalf("EtcdRecover: %v", err)
			}

			_, err = admin.MachineClient.Bootstrap(ctx, &machineapi.BootstrapRequest{RecoverEtcd: true})
			wantCode(t, err, codes.Unknown, "snapshot missing hash")

			if _, err := admin.MachineClient.Bootstrap(ctx, &machineapi.BootstrapRequest{RecoverEtcd: true, RecoverSkipHashCheck: true}); err != nil {
				t.Fatalf("Bootstrap{recover_etcd, recover_skip_hash_check} of a snapshot without its hash: %v", err)
			}

			ec = etcdClientFor(t, tg.cluster.bundle, tg.endpoint)

			gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err := ec.Get(gctx, "/emu/before")

			gcancel()

			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("keyspace restored without the hash check: %v %v", resp, err)
			}

			// again, with the snapshot as EtcdSnapshot streamed it (hash checked)
			resetEphemeral(t, tg)
			admin = tg.admin(t)

			if err := recoverUpload(ctx, admin, snap); err != nil {
				t.Fatalf("EtcdRecover: %v", err)
			}

			if _, err := admin.MachineClient.Bootstrap(ctx, &machineapi.BootstrapRequest{RecoverEtcd: true}); err != nil {
				t.Fatalf("Bootstrap{recover_etcd}: %v", err)
			}

			ec = etcdClientFor(t, tg.cluster.bundle, tg.endpoint)

			gctx, cancel = context.WithTimeout(ctx, 10*time.Second)
			defer cancel()

			resp, err = ec.Get(gctx, "/emu/before")
			if err != nil {
				t.Fatal(err)
			}

			if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "snapshot" {
				t.Fatalf("restored keyspace: %v", resp.Kvs)
			}
		},
	},
	{
		name: "kubernetes/Kubeconfig-archive", needs: emulatorOnly,
		cite: "t:…/v1alpha1_server.go Kubeconfig (a .tar.gz with one file `kubeconfig`; m:client/client.go Kubeconfig unpacks it)",
		run: func(t *testing.T, tg *target) {
			admin := tg.admin(t)

			stream, err := admin.MachineClient.Kubeconfig(t.Context(), &emptypb.Empty{})
			if err != nil {
				t.Fatal(err)
			}

			var archive []byte

			for {
				msg, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}

				if err != nil {
					t.Fatal(err)
				}

				archive = append(archive, msg.GetBytes()...)
			}

			gz, err := gzip.NewReader(bytes.NewReader(archive))
			if err != nil {
				t.Fatalf("not gzip: %v", err)
			}

			tr := tar.NewReader(gz)

			var names []string

			var kc []byte

			for {
				h, err := tr.Next()
				if errors.Is(err, io.EOF) {
					break
				}

				if err != nil {
					t.Fatal(err)
				}

				names = append(names, h.Name)

				if kc, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}

			if len(names) != 1 || names[0] != "kubeconfig" {
				t.Fatalf("archive holds %v, want [kubeconfig]", names)
			}

			cfg, err := clientcmd.Load(kc)
			if err != nil {
				t.Fatal(err)
			}

			cur := cfg.Contexts[cfg.CurrentContext]
			if cur == nil || cfg.CurrentContext != "admin@emu" || cfg.Clusters[cur.Cluster].Server != "https://127.0.0.1:6443" {
				t.Fatalf("kubeconfig contexts %v current %q", cfg.Contexts, cfg.CurrentContext)
			}

			// machinery's helper unpacks the same archive
			b, err := admin.Kubeconfig(t.Context())
			if err != nil {
				t.Fatalf("client.Kubeconfig: %v", err)
			}

			if cfg2, err := clientcmd.Load(b); err != nil || cfg2.CurrentContext != cfg.CurrentContext {
				t.Fatalf("client.Kubeconfig result does not load: %v", err)
			}
		},
	},
}

// resetEphemeral resets the node wiping EPHEMERAL (the etcd data) and waits until it runs again.
func resetEphemeral(t *testing.T, tg *target) {
	t.Helper()

	boots := tg.machine.Info().Boots

	if _, err := tg.admin(t).MachineClient.Reset(t.Context(), &machineapi.ResetRequest{
		Reboot: true, SystemPartitionsToWipe: []*machineapi.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}},
	}); err != nil {
		t.Fatal(err)
	}

	testenv.EventuallyOK(t, 20*time.Second, "reboot after the reset", func() (bool, string) {
		return tg.machine.Info().Boots > boots, tg.machine.Stage().String()
	})
	waitStage(t, tg.cluster.adminFactory(tg.endpoint), runtime.MachineStageRunning)
}

func init() { checks = append(checks, etcdChecks...) }
