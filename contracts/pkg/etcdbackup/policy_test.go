package etcdbackup

import (
	"strings"
	"testing"
	"time"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

func TestInCluster(t *testing.T) {
	custom := ClusterNetworks{PodSubnets: []string{"192.168.0.0/16"}, ServiceSubnets: []string{"172.20.0.0/16"}, DNSDomain: "corp.local"}
	for _, tc := range []struct {
		endpoint string
		n        ClusterNetworks
		want     string
	}{
		{"http://minio.minio.svc:9000", ClusterNetworks{}, "minio.minio.svc is the name of a Service"},
		{"https://s3.backup.svc.cluster.local", ClusterNetworks{}, "name of a Service"},
		{"https://s3.backup.svc.corp.local", custom, "name of a Service"},
		{"http://10.96.0.20:9000", ClusterNetworks{}, "service range 10.96.0.0/12"},
		{"http://10.244.3.4", ClusterNetworks{}, "pod range 10.244.0.0/16"},
		{"http://192.168.1.1", custom, "pod range 192.168.0.0/16"},
		{"http://[::1]:9000", ClusterNetworks{}, ""},
		{"http://10.244.3.4", custom, ""},
		{"https://s3.example.com", ClusterNetworks{}, ""},
		{"https://s3.backup.svc.cluster.local", custom, ""},
	} {
		got := InCluster(tc.endpoint, tc.n)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("InCluster(%s, %+v) = %q, want %q", tc.endpoint, tc.n, got, tc.want)
		}
	}
}

func TestExpiredKeepsTheNewest(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	objs := []Object{{Key: "a", TakenAt: now.Add(-48 * time.Hour)}, {Key: "b", TakenAt: now.Add(-72 * time.Hour)}, {Key: "c", TakenAt: now.Add(-time.Hour)}}
	if got := Expired(objs, 2, 0, now); len(got) != 1 || got[0].Key != "c" {
		t.Errorf("count 2: %+v", got)
	}
	if got := Expired(objs, 10, 24*time.Hour, now); len(got) != 1 || got[0].Key != "b" {
		t.Errorf("maxAge: the newest (a, 48h old) stays, b goes: %+v", got)
	}
}

func TestSnapshotKeyRoundTrips(t *testing.T) {
	at := time.Date(2026, 12, 1, 3, 4, 5, 0, time.UTC)
	key := SnapshotKey("/backups/", "ns", "prod", at, 42)
	if key != "backups/ns/prod/snapshots/20261201T030405Z-r42.db.age" {
		t.Fatalf("key %s", key)
	}
	if got, rev, ok := ParseSnapshotKey(key); !ok || !got.Equal(at) || rev != 42 {
		t.Errorf("parsed %v %d %v", got, rev, ok)
	}
	if _, _, ok := ParseSnapshotKey("backups/ns/prod/restore/marker.json"); ok {
		t.Error("a marker parsed as a snapshot")
	}
}

func TestScheduleIsUTC(t *testing.T) {
	if _, err := ParseSchedule("CRON_TZ=Asia/Tokyo 0 3 * * *"); err == nil || !strings.Contains(err.Error(), "UTC") {
		t.Errorf("a time zone was accepted: %v", err)
	}
	if _, err := ParseSchedule("0 3 * * *"); err != nil {
		t.Error(err)
	}
}

// A key pasted into the wrong place is never echoed back.
func TestRecipientErrorsDoNotQuoteTheKey(t *testing.T) {
	const secret = "AGE-SECRET-KEY-1NOTAVALIDKEYBUTSECRETLOOKING"
	_, err := ParseRecipients([]byte("# ours\n" + secret + "\n"))
	if err == nil || strings.Contains(err.Error(), "NOTAVALID") || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("error %v", err)
	}
	_, err = ParseRecipients([]byte("age1garbage-with-" + secret))
	if err == nil || strings.Contains(err.Error(), "NOTAVALID") {
		t.Errorf("error %v", err)
	}
}

// A restore's marker lives under the cluster's restore/ folder, keyed by its
// operation's name and UID, and round-trips through its stored form; a
// marker of another kind, format or without its operation is refused.
func TestMarkerRoundTrips(t *testing.T) {
	key := MarkerKey("/backups/", "ns", "prod", "restore-1", "0e1d-22")
	if key != "backups/ns/prod/restore/restore-1.0e1d-22.json" {
		t.Fatalf("key %s", key)
	}
	if name, uid, ok := ParseMarkerKey(key); !ok || name != "restore-1" || uid != "0e1d-22" {
		t.Errorf("parsed %q %q %v", name, uid, ok)
	}
	for _, k := range []string{"backups/ns/prod/snapshots/20261201T030405Z-r42.db.age", "backups/ns/prod/restore/x.json", "backups/ns/prod/other/a.b.json"} {
		if _, _, ok := ParseMarkerKey(k); ok {
			t.Errorf("%s parsed as a marker", k)
		}
	}

	m := &Marker{
		Namespace: "ns", Cluster: "prod", Operation: "restore-1", OperationUID: "0e1d-22", Phase: MarkerRunning, Step: "restore-reset", Sequence: 7,
		Spec: ichorv1alpha1.TalosOperationSpec{ClusterName: "prod", Type: ichorv1alpha1.OperationEtcdRestore, EtcdRestore: &ichorv1alpha1.EtcdRestore{
			BackupName: "b", Snapshot: "s", ConfirmClusterName: "prod", IdentityRef: ichorv1alpha1.SecretReference{Name: "id"},
		}},
		Machines: []ichorv1alpha1.MachineProgress{{Name: "cp-1", Phase: ichorv1alpha1.MachineInProgress, Step: "reset-sent", BootID: "b1"}},
	}
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMarker(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Format != Format || got.Sequence != 7 || got.Machines[0].BootID != "b1" || got.Spec.EtcdRestore.IdentityRef.Name != "id" || got.Done() {
		t.Errorf("round trip: %+v", got)
	}

	for _, bad := range []string{`{"format":"9","namespace":"ns","cluster":"c","operation":"o","operationUID":"u","spec":{"type":"etcd-restore","etcdRestore":{}}}`,
		`{"format":"1","namespace":"ns","cluster":"c","operation":"o","operationUID":"u","spec":{"type":"talos"}}`,
		`{"format":"1","spec":{"type":"etcd-restore","etcdRestore":{}}}`, `not json`} {
		if _, err := DecodeMarker([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}
