package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
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
func loadFleet(b testing.TB) {
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

// rawCodec encodes requests as protobuf and keeps responses as bytes: the
// load test times the server, not the client's decoding.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// checkEvery is how often a raw response is decoded in full and checked.
const checkEvery = 25

// BenchmarkListMachines1000 is the load test: 50 concurrent clients list the
// 1,000 machines of a cluster through the real server on loopback, over gRPC
// and over REST. Run it bounded, e.g. -benchtime=1000x. In grpc and rest the
// clients read the whole response as the server sent it but decode only
// every 25th in full (rest asks for gzip, as a browser does, and keeps the
// compressed body), so the figures are the server's: the clients share the
// process and its two cores, and Go's transparent gunzip of 300 kB of JSON
// per call in 50 clients was most of the process's CPU. The -decoded
// variants decode every response in the same process, and so also time the
// clients' decoding on the same cores.
func BenchmarkListMachines1000(b *testing.B) {
	loadFleet(b)
	b.Run("grpc", func(b *testing.B) {
		runLoad(b, func() func() error {
			conn := grpcConn(b, viewer(b))
			var n int
			return func() error { n++; return listGRPC(conn, n%checkEvery == 1) }
		})
	})
	b.Run("rest", func(b *testing.B) {
		runLoad(b, func() func() error {
			c := httpClient()
			tok := viewer(b)
			var n int
			return func() error { n++; return listREST(c, tok, n%checkEvery == 1) }
		})
	})
	b.Run("grpc-decoded", func(b *testing.B) {
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
	b.Run("rest-decoded", func(b *testing.B) {
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

// listREST lists the machines over REST as a browser does, asking for gzip.
// It reads the whole body as sent; when check is set it also decompresses it
// and counts the machines (each machine, and only a machine, has a uid).
func listREST(c *http.Client, tok string, check bool) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, baseURL+"/api/v1/machines", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	// Set by hand, so that the transport leaves the body compressed.
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if !check {
		return nil
	}
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return err
		}
		if body, err = io.ReadAll(zr); err != nil {
			return err
		}
	}
	if got := bytes.Count(body, []byte(`"uid":`)); got < loadMachines {
		return fmt.Errorf("listed %d machines", got)
	}
	return nil
}

// listGRPC lists the machines over gRPC, keeping the raw response (the
// load times the server, not the client's decoding) and, when check is set,
// decoding it and counting the machines.
func listGRPC(conn *grpc.ClientConn, check bool) error {
	var raw []byte
	if err := conn.Invoke(context.Background(), ichorv1.MachineService_ListMachines_FullMethodName, &ichorv1.ListMachinesRequest{}, &raw,
		grpc.ForceCodec(rawCodec{})); err != nil {
		return err
	}
	if !check {
		return nil
	}
	resp := &ichorv1.ListMachinesResponse{}
	if err := proto.Unmarshal(raw, resp); err != nil {
		return err
	}
	if len(resp.GetMachines()) < loadMachines {
		return fmt.Errorf("listed %d machines", len(resp.GetMachines()))
	}
	return nil
}
