package server_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	ichorv1 "github.com/maeshinshin/ichor/contracts/proto/gen/ichor/v1"
)

const (
	loadMachines = 1000
	loadClients  = 50
)

var loadOnce sync.Once

// loadFleet makes the test cluster hold at least loadMachines machines.
func loadFleet(b *testing.B) {
	loadOnce.Do(func() {
		ctx := context.Background()
		sem := make(chan struct{}, 8)
		var wg sync.WaitGroup
		var failed atomic.Value
		for i := range loadMachines {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				m := &ichorv1alpha1.TalosMachine{
					ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: fmt.Sprintf("load-%04d", i)},
					Spec: ichorv1alpha1.TalosMachineSpec{
						ClusterName: testCluster,
						Identity:    ichorv1alpha1.MachineIdentity{UUID: fmt.Sprintf("load-uuid-%04d", i), MACAddresses: []string{"02:00:00:00:00:01"}},
						Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalPending},
						Address:     "10.5.0.100",
					},
				}
				if err := admin.Create(ctx, m); err != nil {
					failed.Store(err)
				}
			}()
		}
		wg.Wait()
		if err, ok := failed.Load().(error); ok {
			b.Fatal(err)
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := machines(b, viewer(b)).ListMachines(context.Background(), &ichorv1.ListMachinesRequest{})
		if err == nil && len(resp.GetMachines()) >= loadMachines {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the cache does not hold %d machines: %v", loadMachines, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runLoad makes b.N calls from loadClients concurrent clients and reports
// the p50 and p99 latencies.
func runLoad(b *testing.B, newClient func() func() error) {
	calls := make([]func() error, loadClients)
	for i := range calls {
		calls[i] = newClient()
		if err := calls[i](); err != nil { // warm the connection
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, loadClients)
	b.ResetTimer()
	for _, call := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				start := time.Now()
				if err := call(); err != nil {
					errs <- err
					return
				}
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkListMachines1000 is the load test: 50 concurrent clients list the
// 1,000 machines of a cluster through the real server on loopback, over gRPC
// and over REST. Run it bounded, e.g. -benchtime=2000x.
func BenchmarkListMachines1000(b *testing.B) {
	loadFleet(b)
	b.Run("grpc", func(b *testing.B) {
		runLoad(b, func() func() error {
			c := machines(b, viewer(b))
			return func() error {
				resp, err := c.ListMachines(context.Background(), &ichorv1.ListMachinesRequest{})
				if err == nil && len(resp.GetMachines()) < loadMachines {
					err = fmt.Errorf("listed %d machines", len(resp.GetMachines()))
				}
				return err
			}
		})
	})
	b.Run("rest", func(b *testing.B) {
		runLoad(b, func() func() error {
			c := httpClient()
			tok := viewer(b)
			return func() error {
				code, body := rest(b, c, http.MethodGet, "/api/v1/machines", tok, "")
				if code != http.StatusOK {
					return fmt.Errorf("status %d", code)
				}
				if ms, _ := body["machines"].([]any); len(ms) < loadMachines {
					return fmt.Errorf("listed %d machines", len(ms))
				}
				return nil
			}
		})
	})
}
