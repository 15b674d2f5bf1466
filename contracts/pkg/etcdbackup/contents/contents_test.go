package contents

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// write builds an etcd backend the way etcd's mvcc stores it: one entry per
// revision in the key bucket, a tombstone marked with a trailing 't'.
func write(t *testing.T, entries []struct {
	rev       int64
	key, val  string
	tombstone bool
}) string {
	t.Helper()

	p := filepath.Join(t.TempDir(), "db")

	db, err := bolt.Open(p, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}

	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte(keyBucket))
		if err != nil {
			return err
		}

		for _, e := range entries {
			k := make([]byte, revBytesLen, markedRevBytesLen)
			binary.BigEndian.PutUint64(k, uint64(e.rev)) //nolint:gosec // the test's revisions are positive
			k[8] = '_'

			if e.tombstone {
				k = append(k, markTombstone)
			}

			v, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte(e.key), Value: []byte(e.val), ModRevision: e.rev})
			if err != nil {
				return err
			}

			if err := b.Put(k, v); err != nil {
				return err
			}
		}

		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	return p
}

// The latest value of each key is read, a deleted key is gone, and the
// Reader serves the custom resources to the shared loaders by namespace.
func TestReadLatestAndTombstones(t *testing.T) {
	cluster := func(version string) string {
		c := ichorv1alpha1.TalosCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod"}, Spec: ichorv1alpha1.TalosClusterSpec{TalosVersion: version}}
		c.APIVersion, c.Kind = ichorv1alpha1.GroupVersion.String(), "TalosCluster"
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}

		return string(data)
	}
	machine := func(ns, name string) string {
		data, err := json.Marshal(ichorv1alpha1.TalosMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: ichorv1alpha1.TalosMachineSpec{ClusterName: "prod"}})
		if err != nil {
			t.Fatal(err)
		}

		return string(data)
	}

	const ck = "/registry/ichor.maesh.dev/talosclusters/ns/prod"
	p := write(t, []struct {
		rev       int64
		key, val  string
		tombstone bool
	}{
		{2, ck, cluster("v1.13.0"), false},
		{3, "/registry/ichor.maesh.dev/talosmachines/ns/cp-1", machine("ns", "cp-1"), false},
		{4, "/registry/ichor.maesh.dev/talosmachines/ns/gone", machine("ns", "gone"), false},
		{5, ck, cluster("v1.14.1"), false},
		{6, "/registry/ichor.maesh.dev/talosmachines/ns/gone", "", true},
		{7, "/registry/ichor.maesh.dev/talosmachines/other/cp-9", machine("other", "cp-9"), false},
		{8, "/registry/configmaps/ns/proto", "k8s\x00binary", false},
	})

	c, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}

	if c.Revision != 8 {
		t.Errorf("revision %d, want 8", c.Revision)
	}

	if _, ok := c.Get("/registry/ichor.maesh.dev/talosmachines/ns/gone"); ok {
		t.Error("a deleted key is live")
	}

	s := runtime.NewScheme()
	if err := ichorv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}

	r := &Reader{C: c, Scheme: s}

	got := &ichorv1alpha1.TalosCluster{}
	if err := r.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "prod"}, got); err != nil || got.Spec.TalosVersion != "v1.14.1" {
		t.Errorf("the cluster's latest value: %q %v", got.Spec.TalosVersion, err)
	}

	if err := r.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "nope"}, got); err == nil {
		t.Error("a missing object was found")
	}

	list := &ichorv1alpha1.TalosMachineList{}
	if err := r.List(context.Background(), list, client.InNamespace("ns")); err != nil || len(list.Items) != 1 || list.Items[0].Name != "cp-1" {
		t.Errorf("the machines of ns: %+v %v", list.Items, err)
	}

	if err := c.DecodeJSON("/registry/configmaps/ns/proto", &struct{}{}); err == nil {
		t.Error("a protobuf value decoded as JSON")
	}
}
