package reclaim

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"

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
			want: map[string][]string{"spec.address": {"Ichor cluster ns/prod", "same Talos API CA", "ichor node remove NAME -n ns"}}},
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

// TestDialErrorsNeverQuoteTheTalosconfig feeds Dial broken talosconfigs that
// carry a recognisable secret and checks that no error repeats it.
func TestDialErrorsNeverQuoteTheTalosconfig(t *testing.T) {
	b := newBundle(t)

	admin, err := b.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin))
	if err != nil {
		t.Fatal(err)
	}

	good := clientconfig.NewConfig("foreign", []string{"192.0.2.1"}, b.Certs.OS.Crt, admin)
	ctxOf := func(c *clientconfig.Config) *clientconfig.Context { return c.Contexts["foreign"] }

	const secret = "SECRET-KEY-MATERIAL-DO-NOT-LEAK"

	for name, mutate := range map[string]func(*clientconfig.Config) []byte{
		"yaml": func(*clientconfig.Config) []byte {
			return []byte("context: foreign\ncontexts:\n  foreign:\n    endpoints: " + secret + "\n    key: [" + secret)
		},
		"yaml type": func(*clientconfig.Config) []byte {
			return []byte("context: foreign\ncontexts: " + secret + "\n")
		},
		"key not base64": func(c *clientconfig.Config) []byte { ctxOf(c).Key = secret + "!!"; return mustBytes(t, c) },
		"key not a key": func(c *clientconfig.Config) []byte {
			ctxOf(c).Key = base64.StdEncoding.EncodeToString([]byte(secret))
			return mustBytes(t, c)
		},
		"ca not a cert": func(c *clientconfig.Config) []byte {
			ctxOf(c).CA = base64.StdEncoding.EncodeToString([]byte(secret))
			return mustBytes(t, c)
		},
		"no context":      func(c *clientconfig.Config) []byte { c.Context = "other-" + secret; return mustBytes(t, c) },
		"no current":      func(c *clientconfig.Config) []byte { c.Context = ""; return mustBytes(t, c) },
		"missing crt":     func(c *clientconfig.Config) []byte { ctxOf(c).Crt = ""; return mustBytes(t, c) },
		"a key somewhere": func(c *clientconfig.Config) []byte { ctxOf(c).Crt = ctxOf(c).Key; return mustBytes(t, c) },
	} {
		t.Run(name, func(t *testing.T) {
			c := clientconfig.NewConfig("foreign", []string{"192.0.2.1"}, b.Certs.OS.Crt, admin)

			_, err := Dial(context.Background(), "127.0.0.1", 1, mutate(c))
			if err == nil {
				t.Fatal("a broken talosconfig was accepted")
			}

			for _, leak := range [][]byte{[]byte(secret), admin.Key, []byte(ctxOf(good).Key), []byte(ctxOf(good).Crt)} {
				if strings.Contains(err.Error(), string(leak)) {
					t.Fatalf("the error quotes the talosconfig: %v", err)
				}
			}
		})
	}
}

func mustBytes(t *testing.T, c *clientconfig.Config) []byte {
	t.Helper()

	out, err := c.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	return out
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
