package kube

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// reviewTimeout bounds one access review: it runs detached from the request
// that started it, since the requests waiting on it share its answer.
const reviewTimeout = 10 * time.Second

// maxReviews bounds the cache: it is emptied when it grows past this.
const maxReviews = 4096

// reviewKey is what an access review's answer depends on: exactly what the
// impersonating client sends (the user and their groups) and what is asked.
// Each part is quoted, so that no name can pass for two (the groups "a,b"
// and "a", "b" differ).
func reviewKey(id identity.Identity, verb, resource, ns string) string {
	g := append([]string(nil), id.Groups...)
	sort.Strings(g)
	var b strings.Builder
	b.WriteString(strconv.Quote(id.Username))
	b.WriteByte('[')
	for _, group := range g {
		b.WriteString(strconv.Quote(group))
	}
	b.WriteByte(']')
	for _, s := range []string{verb, resource, ns} {
		b.WriteString(strconv.Quote(s))
	}
	return b.String()
}

type reviewEntry struct {
	allowed bool
	reason  string
	at      time.Time
}

// reviewCache keeps the API server's access review answers for a short time,
// so that a user's requests do not each cost a SubjectAccessReview:
//
//   - An allowed answer is reused for ttl: a role revoked, or a binding
//     deleted, takes effect within ttl. In the last quarter of ttl the answer
//     is still used, and one review refreshes it in the background, so that a
//     busy user's requests do not all wait for a review when it expires.
//   - A denied answer is reused for denyTTL, shorter than ttl (a fifth of
//     it): holding a refusal is always safe, so it is kept only long enough
//     to absorb a burst of refused requests (a console retrying, a script
//     without the right) instead of sending the API server a review for each;
//     a role just granted then takes effect within denyTTL.
//   - A failed review is not kept: the next request asks again.
//   - Concurrent requests that find no answer share one review
//     (singleflight), so 50 clients arriving together cost one review, not 50
//     that would queue behind the client's rate limit.
type reviewCache struct {
	ttl, denyTTL time.Duration
	now          func() time.Time

	mu      sync.Mutex
	entries map[string]reviewEntry
	flight  singleflight.Group
}

func newReviewCache(ttl time.Duration) *reviewCache {
	return &reviewCache{ttl: ttl, denyTTL: ttl / 5, now: time.Now, entries: map[string]reviewEntry{}}
}

// decide returns the answer for key: a kept one, or the one ask gets from the
// API server. ask runs with a context that keeps ctx's values (the identity
// to impersonate) but not its cancellation, since other requests may wait on
// it; a request whose own context ends stops waiting.
func (c *reviewCache) decide(ctx context.Context, key string, ask func(context.Context) (reviewEntry, error)) (reviewEntry, error) {
	e, ok, refresh := c.get(key)
	if ok {
		if refresh {
			c.flight.DoChan(key, c.review(ctx, key, ask)) // refreshed in the background; its answer is kept
		}
		return e, nil
	}
	select {
	case res := <-c.flight.DoChan(key, c.review(ctx, key, ask)):
		if res.Err != nil {
			return reviewEntry{}, res.Err
		}
		return res.Val.(reviewEntry), nil
	case <-ctx.Done():
		return reviewEntry{}, ctx.Err()
	}
}

func (c *reviewCache) review(ctx context.Context, key string, ask func(context.Context) (reviewEntry, error)) func() (any, error) {
	return func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		// The answer's age counts from the question: it says what RBAC
		// allowed then, not when the answer came back.
		at := c.now()
		e, err := ask(rctx)
		if err != nil {
			return nil, err
		}
		e.at = at
		c.put(key, e)
		return e, nil
	}
}

// get returns the kept answer for key while it is valid, and whether it is
// due for a refresh.
func (c *reviewCache) get(k string) (e reviewEntry, ok, refresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok = c.entries[k]
	if !ok {
		return reviewEntry{}, false, false
	}
	age := c.now().Sub(e.at)
	if !e.allowed {
		return e, age <= c.denyTTL, false
	}
	return e, age <= c.ttl, age > c.ttl-c.ttl/4
}

func (c *reviewCache) put(k string, e reviewEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= maxReviews {
		clear(c.entries)
	}
	c.entries[k] = e
}
