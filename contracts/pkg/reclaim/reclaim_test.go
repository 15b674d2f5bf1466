package reclaim

import (
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

func TestResetRequestNamesStateAndEphemeral(t *testing.T) {
	for _, tc := range []struct{ graceful, reboot bool }{{true, true}, {true, false}, {false, true}, {false, false}} {
		r := ResetRequest(tc.graceful, tc.reboot)
		if r.GetGraceful() != tc.graceful || r.GetReboot() != tc.reboot {
			t.Fatalf("ResetRequest(%v, %v) = graceful %v reboot %v", tc.graceful, tc.reboot, r.GetGraceful(), r.GetReboot())
		}

		if r.GetMode() != machine.ResetRequest_ALL {
			t.Fatalf("mode %s, want the default", r.GetMode())
		}

		if len(r.GetUserDisksToWipe()) != 0 {
			t.Fatalf("user disks named: %v", r.GetUserDisksToWipe())
		}

		labels := make([]string, 0, len(r.GetSystemPartitionsToWipe()))
		for _, p := range r.GetSystemPartitionsToWipe() {
			if !p.GetWipe() {
				t.Fatalf("partition %s is named without wipe: Talos would skip it", p.GetLabel())
			}

			labels = append(labels, p.GetLabel())
		}

		if strings.Join(labels, ",") != "STATE,EPHEMERAL" {
			t.Fatalf("partitions %v, want STATE and EPHEMERAL (an empty list wipes the whole system disk)", labels)
		}
	}
}

func inspection(mutate ...func(*Inspection)) *Inspection {
	in := &Inspection{
		UUID:            "4c4c4544-0000-1000-8000-000000000001",
		Hostname:        "foreign-1",
		MachineType:     "worker",
		ClusterName:     "theirs",
		ClusterID:       "their-id",
		OSCAFingerprint: "00ff",
	}
	for _, m := range mutate {
		m(in)
	}

	return in
}

func controlPlane(healthy ...bool) func(*Inspection) {
	return func(in *Inspection) {
		in.MachineType = "controlplane"
		in.ControlPlane = true
		in.LocalMemberID = 1

		for i, h := range healthy {
			in.EtcdMembers = append(in.EtcdMembers, guard.EtcdMember{ID: uint64(i + 1), Name: "cp", Healthy: h})
		}
	}
}

func newBundle(t *testing.T) *secrets.Bundle {
	t.Helper()

	b, err := secrets.NewBundle(secrets.NewFixedClock(secrets.NewClock().Now()), nil)
	if err != nil {
		t.Fatal(err)
	}

	return b
}

func TestDecide(t *testing.T) {
	ours := newBundle(t)
	managed := []ManagedCluster{{Namespace: "ns", Name: "prod", ClusterID: ours.Cluster.ID, OSCACert: ours.Certs.OS.Crt}}

	for _, tc := range []struct {
		name  string
		in    *Inspection
		force bool
		want  map[string][]string // field → words; nil = allowed
	}{
		{name: "foreign worker", in: inspection()},
		{name: "same Talos API CA", in: inspection(func(in *Inspection) { in.OSCAFingerprint = Fingerprint(ours.Certs.OS.Crt) }),
			want: map[string][]string{"spec.address": {"Ichor cluster ns/prod", "same Talos API CA", "ichor node remove NAME -n ns", "ichor adopt --cluster prod -n ns --add-machine ADDRESS"}}},
		{name: "same cluster ID", in: inspection(func(in *Inspection) { in.ClusterID = ours.Cluster.ID }),
			want: map[string][]string{"spec.address": {"same cluster ID"}}},
		{name: "Ichor machine forced", in: inspection(func(in *Inspection) { in.ClusterID = ours.Cluster.ID }), force: true,
			want: map[string][]string{"spec.address": {"already belongs"}}},
		{name: "last control plane", in: inspection(controlPlane(true)),
			want: map[string][]string{"spec.force": {"last voting etcd member", "spec.force"}}},
		{name: "last control plane forced", in: inspection(controlPlane(true)), force: true},
		{name: "healthy control plane of three", in: inspection(controlPlane(true, true, true))},
		{name: "quorum break", in: inspection(controlPlane(true, true, false)),
			want: map[string][]string{"spec.force": {"1 healthy of 2"}}},
		{name: "quorum break forced", in: inspection(controlPlane(true, true, false)), force: true},
		{name: "unreadable etcd", in: inspection(controlPlane(), func(in *Inspection) { in.EtcdError = "etcd service is not running" }),
			want: map[string][]string{"spec.force": {"could not be read", "etcd service is not running"}}},
		{name: "unreadable etcd forced", in: inspection(controlPlane(), func(in *Inspection) { in.EtcdError = "down" }), force: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.in, Facts{Managed: managed, Force: tc.force})
			if len(got) != len(tc.want) {
				t.Fatalf("want refusals on %v, got %v", tc.want, got)
			}

			for _, r := range got {
				words, ok := tc.want[r.Field]
				if !ok {
					t.Fatalf("unexpected refusal %v", r)
				}

				for _, w := range words {
					if !strings.Contains(r.Error(), w) {
						t.Errorf("refusal %q does not say %q", r.Error(), w)
					}
				}
			}
		})
	}
}

func TestCheckConfirmation(t *testing.T) {
	in := inspection()

	if r := CheckConfirmation(in, "  "+strings.ToUpper(in.UUID)+" "); r != nil {
		t.Fatalf("the UUID in capitals is consent: %v", r)
	}

	for typed, want := range map[string]string{
		"":                                     "waits for the machine's UUID",
		"4c4c4544-0000-1000-8000-000000000002": "is not the machine's UUID",
	} {
		r := CheckConfirmation(in, typed)
		if r == nil || !strings.Contains(r.Error(), want) || !strings.Contains(r.WayOut, in.UUID) {
			t.Errorf("typed %q: got %v, want a refusal saying %q and naming the UUID", typed, r, want)
		}
	}

	if r := CheckConfirmation(inspection(func(in *Inspection) { in.UUID = "" }), ""); r == nil || !strings.Contains(r.Rule, "no SMBIOS UUID") {
		t.Errorf("a machine without a UUID: got %v", r)
	}
}

func TestFingerprint(t *testing.T) {
	b := newBundle(t)
	if f := Fingerprint(b.Certs.OS.Crt); len(f) != 64 || f == Fingerprint(b.Certs.K8s.Crt) {
		t.Fatalf("fingerprint %q", f)
	}

	if Fingerprint([]byte("no pem")) != "" {
		t.Fatal("a fingerprint of nothing")
	}
}

func TestGraceful(t *testing.T) {
	for _, tc := range []struct {
		name       string
		in         *Inspection
		ungraceful bool
		want       bool
	}{
		{"worker", inspection(), false, true},
		{"worker, asked ungraceful", inspection(), true, false},
		{"control plane of three", inspection(controlPlane(true, true, true)), false, true},
		{"last control plane", inspection(controlPlane(true)), false, false},
		{"control plane with unreadable etcd", inspection(controlPlane()), false, false},
	} {
		if got := Graceful(tc.in, tc.ungraceful); got != tc.want {
			t.Errorf("%s: graceful %v, want %v", tc.name, got, tc.want)
		}
	}
}
