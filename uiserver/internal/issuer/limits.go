package issuer

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Limits bound password sign-ins (architecture, "Trust"): failed attempts
// per client address and per user name, each with an exponential back-off
// once its free attempts are spent.
type Limits struct {
	// FreePerUser is the failed passwords a user name may see in Window
	// before each further attempt waits; zero means 5.
	FreePerUser int
	// FreePerAddress is the same for one client address; zero means 20.
	FreePerAddress int
	// Window forgets failures older than it; zero means 15 minutes.
	Window time.Duration
	// Backoff is the first wait, doubled with each further failure up to
	// MaxBackoff; zero means 1 s and 15 minutes.
	Backoff, MaxBackoff time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.FreePerUser == 0 {
		l.FreePerUser = 5
	}
	if l.FreePerAddress == 0 {
		l.FreePerAddress = 20
	}
	if l.Window == 0 {
		l.Window = 15 * time.Minute
	}
	if l.Backoff == 0 {
		l.Backoff = time.Second
	}
	if l.MaxBackoff == 0 {
		l.MaxBackoff = 15 * time.Minute
	}
	return l
}

// maxTracked bounds the names and addresses the limiter remembers; when it
// is full of live entries a new one is not recorded until some expire (the
// per-form failure bound and the hash slots still hold).
const maxTracked = 100000

// limiter counts failures per key ("user:<name>", "addr:<ip>").
type limiter struct {
	mu      sync.Mutex
	entries map[string]*failures
}

type failures struct {
	free  int
	count int
	last  time.Time
	until time.Time
}

// wait returns how long key must wait before its next attempt; zero means now.
func (l *limiter) wait(key string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.entries[key]
	if ok && now.Before(f.until) {
		return f.until.Sub(now)
	}
	return 0
}

// fail records a failure of key, with free failures before the back-off.
func (l *limiter) fail(key string, free int, lim Limits, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entries == nil {
		l.entries = map[string]*failures{}
	}
	f, ok := l.entries[key]
	if !ok || now.Sub(f.last) > lim.Window {
		if !ok && len(l.entries) >= maxTracked {
			l.sweepLocked(lim, now)
			if len(l.entries) >= maxTracked {
				return
			}
		}
		f = &failures{free: free}
		l.entries[key] = f
	}
	f.count++
	f.last = now
	if over := f.count - f.free; over >= 0 {
		d := lim.MaxBackoff
		if over < 30 {
			d = min(lim.Backoff<<over, lim.MaxBackoff)
		}
		f.until = now.Add(d)
	}
}

// reset forgets key's failures (a user who signed in).
func (l *limiter) reset(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.entries, key)
}

func (l *limiter) sweepLocked(lim Limits, now time.Time) {
	for k, f := range l.entries {
		if now.Sub(f.last) > lim.Window && now.After(f.until) {
			delete(l.entries, k)
		}
	}
}

// clientAddress is the address the request came from (not a header a client
// could set).
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// retryAfter sets Retry-After to d, rounded up to whole seconds.
func retryAfter(w http.ResponseWriter, d time.Duration) {
	s := int((d + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(max(s, 1)))
}
