package machinestate

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Pace spaces the periodic looks of a per-machine reconciler (a Talos dial
// and a few reads each) so that, all machines together, they stay under Rate
// per second: a machine is looked at every Every(period), which is period
// while the fleet is small and stretches with it. A look costs a few
// milliseconds of CPU (a client certificate, a TLS handshake, the reads); a
// thousand machines each looked at every 30 s would keep a tenth of a core
// busy doing nothing, and five thousand half of one. Anything that changes a
// machine still wakes it at once: only the idle looks are spaced.
//
// The machines are counted from the informer's cache, at most once per
// countEvery.
type Pace struct {
	// Reader counts the TalosMachines (the manager's cached client).
	Reader client.Reader
	// Rate is the looks per second, all machines together; zero means
	// DefaultLookRate.
	Rate float64

	mu sync.Mutex
	n  int
	at time.Time
}

// DefaultLookRate is Pace's rate of looks per second when none is set.
const DefaultLookRate = 5

// countEvery is how often Pace counts the machines again.
const countEvery = 30 * time.Second

// Every is how long until a machine's next idle look: period, or the time
// the fleet takes to be looked at once at Rate when that is longer, with up to
// a fifth more at random so that machines do not look in step.
func (p *Pace) Every(ctx context.Context, period time.Duration) time.Duration {
	d := max(period, p.span(ctx))

	return d + time.Duration(rand.Int64N(int64(d)/5+1)) //nolint:gosec // jitter, not a secret
}

// span is the time looks at every machine take at Rate.
func (p *Pace) span(ctx context.Context) time.Duration {
	rate := p.Rate
	if rate <= 0 {
		rate = DefaultLookRate
	}

	return time.Duration(float64(p.count(ctx)) / rate * float64(time.Second))
}

// count is the number of TalosMachines, read again when older than
// countEvery; a failed count keeps the last one.
func (p *Pace) count(ctx context.Context) int {
	p.mu.Lock()
	defer p.mu.Unlock()

	if p.Reader == nil || !p.at.IsZero() && time.Since(p.at) < countEvery {
		return p.n
	}

	var list ichorv1alpha1.TalosMachineList
	// Counted, never kept or changed: no copy of each object is needed.
	if err := p.Reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err == nil {
		p.n, p.at = len(list.Items), time.Now()
	}

	return p.n
}
