package etcdbackup

import (
	"context"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

var (
	fillOnce sync.Once
	fillErr  error
)

// BenchmarkSnapshotEncryptUpload measures one backup of a 100 MiB etcd:
// Talos's EtcdSnapshot from the emulated control plane (a real etcd
// member), etcd's own check, age encryption and the upload to the real S3
// server, all on loopback. The bytes per operation are the plain snapshot's.
func BenchmarkSnapshotEncryptUpload(b *testing.B) {
	ctx := context.Background()

	// 100 values of 1 MiB, once: the database grows past 100 MiB.
	fillOnce.Do(func() {
		fillErr = etcdPut(ctx, "registry/bench", 100, 1<<20)
		if fillErr == nil {
			fillErr = k8s.Create(ctx, newBackup("bench"))
		}
	})

	if fillErr != nil {
		b.Fatal(fillErr)
	}

	bk := newBackup("bench")

	cluster := &ichorv1alpha1.TalosCluster{}
	testenv.Must(b, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster))

	st, f := reconciler.openStore(ctx, bk)
	if f != nil {
		b.Fatal(f)
	}

	b.ResetTimer()

	var size int64

	for i := range b.N {
		if f := reconciler.attempt(ctx, bk, cluster, st, time.Now().Add(time.Duration(i)*time.Second)); f != nil {
			b.Fatal(f)
		}

		_, m, err := st.Stat(ctx, bk.Status.Snapshots[0].Name)
		testenv.Must(b, err)

		size = m.SnapshotSize
	}

	b.StopTimer()
	b.SetBytes(size)
	b.ReportMetric(float64(size)/(1<<20), "MiB/snapshot")
}
