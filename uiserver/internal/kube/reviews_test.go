package kube

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// clock is the review cache's time, moved by the test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

func testCache(ttl time.Duration) (*reviewCache, *clock) {
	clk := &clock{t: time.Unix(1_000_000, 0)}
	c := newReviewCache(ttl)
	c.now = clk.now
	return c, clk
}

// answers is the API server's answer for the test: it counts the reviews
// and, with gate set, answers only once gate is closed.
type answers struct {
	allowed atomic.Bool
	asked   atomic.Int32
	gate    chan struct{}
}

func (a *answers) ask(context.Context) (reviewEntry, error) {
	a.asked.Add(1)
	if a.gate != nil {
		<-a.gate
	}
	return reviewEntry{allowed: a.allowed.Load()}, nil
}

// decide asks c for the key "k".
func decide(t *testing.T, c *reviewCache, a *answers) bool {
	t.Helper()
	e, err := c.decide(context.Background(), "k", a.ask)
	if err != nil {
		t.Fatal(err)
	}
	return e.allowed
}

// TestReviewCacheKeepsAnswersForTheirTTL: an allowed answer is reused for the
// TTL and not after, so a revocation takes effect within it; a refusal is
// reused for a fifth of it, so a grant takes effect within that.
func TestReviewCacheKeepsAnswersForTheirTTL(t *testing.T) {
	c, clk := testCache(5 * time.Second)
	a := &answers{}
	a.allowed.Store(true)
	if !decide(t, c, a) {
		t.Fatal("refused an allowed user")
	}
	a.allowed.Store(false) // the role is revoked
	clk.add(3 * time.Second)
	if !decide(t, c, a) || a.asked.Load() != 1 {
		t.Fatalf("within the TTL: want the kept answer and one review, asked %d", a.asked.Load())
	}
	clk.add(2*time.Second + time.Millisecond)
	if decide(t, c, a) {
		t.Fatal("after the TTL the revoked user is still allowed")
	}
	// The refusal is kept a fifth of the TTL (1 s), then asked again.
	a.allowed.Store(true) // the role is granted again
	clk.add(time.Second)
	if decide(t, c, a) {
		t.Fatal("within a fifth of the TTL the refusal was not kept")
	}
	clk.add(time.Millisecond)
	if !decide(t, c, a) {
		t.Fatal("a fifth of the TTL after the refusal the grant has no effect")
	}
}

// TestReviewCacheRefreshesAheadOfExpiry: in the last quarter of its TTL an
// allowed answer is still used and one review refreshes it, so a busy user
// does not wait for a review at expiry; the refreshed answer is kept.
func TestReviewCacheRefreshesAheadOfExpiry(t *testing.T) {
	c, clk := testCache(4 * time.Second)
	a := &answers{}
	a.allowed.Store(true)
	decide(t, c, a)
	a.allowed.Store(false)
	clk.add(3*time.Second + time.Millisecond) // into the last quarter
	if !decide(t, c, a) {
		t.Fatal("an answer within its TTL was not used")
	}
	// The background refresh ends with the refusal kept.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if e, ok, _ := c.get("k"); ok && !e.allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the refresh did not keep the new answer")
		}
		time.Sleep(time.Millisecond)
	}
	if decide(t, c, a) {
		t.Fatal("the refreshed refusal was not used")
	}
}

// TestReviewCacheSharesOneReview: concurrent requests without an answer
// wait for one review; a failed review is not kept.
func TestReviewCacheSharesOneReview(t *testing.T) {
	c, _ := testCache(5 * time.Second)
	a := &answers{gate: make(chan struct{})}
	a.allowed.Store(true)
	const clients = 50
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Go(func() {
			e, err := c.decide(context.Background(), "k", a.ask)
			if err == nil && !e.allowed {
				err = errors.New("refused")
			}
			errs <- err
		})
	}
	// Wait until the one review is under way, then let it answer.
	for a.asked.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(a.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := a.asked.Load(); n != 1 {
		t.Fatalf("%d reviews for %d concurrent requests, want 1", n, clients)
	}

	fail := errors.New("the API server is unreachable")
	var failed atomic.Int32
	failing := func(context.Context) (reviewEntry, error) { failed.Add(1); return reviewEntry{}, fail }
	for range 2 {
		if _, err := c.decide(context.Background(), "other", failing); !errors.Is(err, fail) {
			t.Fatalf("a failed review: %v", err)
		}
	}
	if failed.Load() != 2 {
		t.Fatalf("a failed review was kept: %d reviews for 2 requests", failed.Load())
	}
}

// TestReviewKeyIsTheWholeIdentity: answers are kept per user, per set of
// groups (in any order) and per question.
func TestReviewKeyIsTheWholeIdentity(t *testing.T) {
	vera := identity.Identity{Username: "ichor:vera", Groups: []string{"ichor:viewer", "x"}}
	same := identity.Identity{Username: "ichor:vera", Groups: []string{"x", "ichor:viewer"}}
	if reviewKey(vera, "list", "talosmachines", "ns") != reviewKey(same, "list", "talosmachines", "ns") {
		t.Fatal("the order of the groups changes the key")
	}
	for _, other := range []string{
		reviewKey(identity.Identity{Username: "ichor:vera"}, "list", "talosmachines", "ns"),
		reviewKey(identity.Identity{Username: "ichor:victor", Groups: vera.Groups}, "list", "talosmachines", "ns"),
		reviewKey(vera, "delete", "talosmachines", "ns"),
		reviewKey(vera, "list", "talosclusters", "ns"),
		reviewKey(vera, "list", "talosmachines", "other"),
		// "a,b" as one group is not the groups a and b.
		reviewKey(identity.Identity{Username: "ichor:vera", Groups: []string{"ichor:viewer,x"}}, "list", "talosmachines", "ns"),
	} {
		if other == reviewKey(vera, "list", "talosmachines", "ns") {
			t.Fatalf("two questions share the key %q", other)
		}
	}
}
