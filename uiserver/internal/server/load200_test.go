package server_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// uiLoadEnv holds the duration of BenchmarkUILoad200's load (e.g. 60s); the
// benchmark is skipped without it, so neither `go test ./...` nor
// `go tool task bench` spends a minute on it. `go tool task bench:ui-load`
// sets it.
const uiLoadEnv = "ICHOR_UI_LOAD"

const (
	uiLoadClients = 200
	// goroutineSlack is how many goroutines above the count before the load
	// the process may keep after it: the API server client's and the cache's
	// own come and go (a watch renewed, a review in flight), a leak per
	// client or per request would be hundreds.
	goroutineSlack = 20
)

// loadResult is one transport's calls.
type loadResult struct {
	mu   sync.Mutex
	lat  []time.Duration
	errs []error
}

func (r *loadResult) add(lat []time.Duration, errs []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lat = append(r.lat, lat...)
	r.errs = append(r.errs, errs...)
}

// BenchmarkUILoad200 is the sustained load of issue 30: 200 clients, each a
// user of its own (ichor:load-NNN, a viewer) with its own connection, list
// the 1,000 machines back to back for $ICHOR_UI_LOAD on loopback, half over
// REST and half over gRPC. It fails on any failed call and when the
// process's goroutines do not settle back to their number before the load
// once the clients have closed their connections; it reports each
// transport's p50, p99 and calls. Run it once: -benchtime 1x.
func BenchmarkUILoad200(b *testing.B) {
	v := os.Getenv(uiLoadEnv)
	if v == "" {
		b.Skip(uiLoadEnv + " is not set: `go tool task bench:ui-load` runs this load")
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a duration such as 60s", uiLoadEnv, v)
	}
	loadFleet(b)
	before := settledGoroutines()

	var restRes, grpcRes loadResult
	var closers []func()
	calls := make([]func() error, uiLoadClients)
	for i := range calls {
		tok := token(b, fmt.Sprintf("ichor:load-%03d", i), "ichor:viewer")
		if i%2 == 0 {
			c := httpClient()
			closers = append(closers, c.CloseIdleConnections)
			var n int
			calls[i] = func() error { n++; return listREST(c, tok, n%checkEvery == 1) }
		} else {
			conn := grpcConn(b, tok)
			closers = append(closers, func() { _ = conn.Close() })
			var n int
			calls[i] = func() error { n++; return listGRPC(conn, n%checkEvery == 1) }
		}
	}

	b.ResetTimer()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for i, call := range calls {
		res := &restRes
		if i%2 == 1 {
			res = &grpcRes
		}
		wg.Go(func() {
			var lat []time.Duration
			var errs []error
			for ctx.Err() == nil {
				start := time.Now()
				if err := call(); err != nil {
					// One failure fails the load; this client stops
					// rather than count a dead server's refusals.
					errs = append(errs, err)
					break
				}
				lat = append(lat, time.Since(start))
			}
			res.add(lat, errs)
		})
	}
	wg.Wait()
	b.StopTimer()

	for name, r := range map[string]*loadResult{"rest": &restRes, "grpc": &grpcRes} {
		if len(r.errs) > 0 {
			b.Errorf("%s: %d of %d calls failed; the first: %v", name, len(r.errs), len(r.errs)+len(r.lat), r.errs[0])
		}
		if len(r.lat) == 0 {
			b.Fatalf("%s: no call succeeded", name)
		}
		slices.Sort(r.lat)
		pct := func(p float64) float64 { return float64(r.lat[int(p*float64(len(r.lat)-1))].Microseconds()) / 1000 }
		b.ReportMetric(pct(0.50), name+"-p50-ms")
		b.ReportMetric(pct(0.99), name+"-p99-ms")
		b.ReportMetric(float64(len(r.lat)), name+"-calls")
	}
	b.ReportMetric(0, "ns/op")

	// The clients go away; the server's goroutines for their connections
	// and calls must go too. They end as the server reads the closed
	// connections, so the count is polled, not read after a fixed pause.
	for _, c := range closers {
		c()
	}
	after, ok := goroutinesSettle(before+goroutineSlack, time.Minute)
	b.ReportMetric(float64(after-before), "goroutines-kept")
	if !ok {
		var dump strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
		b.Fatalf("goroutines: %d before the load, still %d a minute after it (allowed %d more):\n%s", before, after, goroutineSlack, dump.String())
	}
	b.Logf("goroutines: %d before the load, %d after it", before, after)
}

// settledGoroutines is the number of goroutines once it stops falling
// (setup's connections closing), polled.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m >= n {
			return m
		}
		n = m
	}
	return n
}

// goroutinesSettle polls until at most limit goroutines run, or within
// within; it returns the last count and whether it came down to limit.
func goroutinesSettle(limit int, within time.Duration) (int, bool) {
	deadline := time.Now().Add(within)
	for {
		n := runtime.NumGoroutine()
		if n <= limit {
			return n, true
		}
		if time.Now().After(deadline) {
			return n, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
