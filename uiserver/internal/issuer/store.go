package issuer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// Record is a sign-in session as a Store keeps it: who signed in, the
// authorization code it was made from and its refresh-token family. Codes
// and refresh tokens are kept as hashes only.
type Record struct {
	// SID is the session ID (the sid claim), also the first part of its
	// code and refresh tokens.
	SID string
	ID  identity.Identity
	// Fingerprint is the user's password hash fingerprint at sign-in (Ichor's
	// users only): another one ends the session.
	Fingerprint string
	Client      string
	Scopes      []string
	AuthTime    time.Time
	// Expires is the code's expiry until the code is exchanged, then the session's end.
	Expires time.Time
	Code    CodeRecord
	// RefreshHash is the hash of the refresh token that may be used next.
	RefreshHash string
	// UsedRefresh are the hashes of refresh tokens already used.
	UsedRefresh []string
	Revoked     bool
	// Ended says why the session was revoked, when not by its user.
	Ended string

	// version is the store's version of the record, for Update's compare-and-swap.
	version string
}

// CodeRecord is the authorization code of a session. A code is exchanged
// once: the first presentation marks it used, whatever the outcome, and a
// second presentation revokes the session made from it (RFC 6749 §4.1.2:
// someone else holds a copy of the code).
type CodeRecord struct {
	Hash, Redirect, Nonce, Challenge string
	Expires                          time.Time
	Used                             bool
}

// live reports whether the session's tokens count at now.
func (r *Record) live(now time.Time) bool {
	return r.Code.Used && r.RefreshHash != "" && !r.Revoked && !now.After(r.Expires)
}

func (r *Record) clone() *Record {
	c := *r
	c.ID.Groups = slices.Clone(r.ID.Groups)
	c.Scopes = slices.Clone(r.Scopes)
	c.UsedRefresh = slices.Clone(r.UsedRefresh)
	return &c
}

// Store keeps the sign-in sessions. ichor-ui's replicas share one
// (KubeStore, IchorUISession objects), so that every replica can exchange a
// code, refresh a session and honour a revocation made on another.
type Store interface {
	// Create stores a new record; its SID is new.
	Create(ctx context.Context, r *Record) error
	// Get reads a record as stored now; ErrNoSession when there is none.
	Get(ctx context.Context, sid string) (*Record, error)
	// Peek reads a record quickly for the check of every access token; it
	// may lag a change made on another replica by the time a watch takes.
	Peek(ctx context.Context, sid string) (*Record, error)
	// Update writes r if it was not changed since it was read; ErrConflict otherwise.
	Update(ctx context.Context, r *Record) error
	// Delete removes r if it was not changed since it was read (an ended
	// session is not deleted over a change it has not seen); a missing or
	// changed one is no error.
	Delete(ctx context.Context, r *Record) error
	// List returns every record (possibly lagging, as Peek).
	List(ctx context.Context) ([]*Record, error)
}

// Store errors.
var (
	ErrNoSession = errors.New("no such sign-in session")
	ErrConflict  = errors.New("the sign-in session changed since it was read")
)

// errNoChange tells update that fn changed nothing to write.
var errNoChange = errors.New("no change")

// update applies fn to the stored record sid and writes it with a
// compare-and-swap, reading again and re-applying fn when another replica
// changed it meanwhile. fn returning errNoChange writes nothing; any other
// error is returned as is. The record written (or read) is returned.
func (i *Issuer) update(ctx context.Context, sid string, fn func(r *Record) error) (*Record, error) {
	for range 10 {
		r, err := i.store.Get(ctx, sid)
		if err != nil {
			return nil, err
		}
		if err := fn(r); err != nil {
			if errors.Is(err, errNoChange) {
				return r, nil
			}
			return r, err
		}
		switch err := i.store.Update(ctx, r); {
		case errors.Is(err, ErrConflict):
			continue
		case err != nil:
			return nil, err
		}
		return r, nil
	}
	return nil, fmt.Errorf("the sign-in session kept changing while it was written: %w", ErrConflict)
}

// newSID is a new session ID: 128 random bits in hex, a valid object name.
func newSID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return hex.EncodeToString(b)
}

// sessionToken is a code or refresh token of session sid: "<sid>.<random>",
// so that any replica finds its session by name.
func sessionToken(sid string) string { return sid + "." + randomString() }

// tokenSession splits a code or refresh token into its session ID and its hash.
func tokenSession(tok string) (sid, h string, ok bool) {
	sid, _, ok = strings.Cut(tok, ".")
	if !ok || len(sid) != 32 || strings.Trim(sid, "0123456789abcdef") != "" {
		return "", "", false
	}
	return sid, tokenHash(tok), true
}

func tokenHash(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

// MemoryStore keeps the sessions in this process: one replica only (a local
// run, or tests of the issuer's protocol).
type MemoryStore struct {
	mu      sync.Mutex
	records map[string]*Record
	next    int
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{records: map[string]*Record{}} }

// Create implements Store.
func (m *MemoryStore) Create(_ context.Context, r *Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.records[r.SID]; ok {
		return fmt.Errorf("session %s exists", r.SID)
	}
	m.next++
	c := r.clone()
	c.version = strconv.Itoa(m.next)
	m.records[r.SID] = c
	r.version = c.version
	return nil
}

// Get implements Store.
func (m *MemoryStore) Get(_ context.Context, sid string) (*Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.records[sid]
	if !ok {
		return nil, ErrNoSession
	}
	return r.clone(), nil
}

// Peek implements Store.
func (m *MemoryStore) Peek(ctx context.Context, sid string) (*Record, error) { return m.Get(ctx, sid) }

// Update implements Store.
func (m *MemoryStore) Update(_ context.Context, r *Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.records[r.SID]
	if !ok {
		return ErrNoSession
	}
	if cur.version != r.version {
		return ErrConflict
	}
	m.next++
	c := r.clone()
	c.version = strconv.Itoa(m.next)
	m.records[r.SID] = c
	r.version = c.version
	return nil
}

// Delete implements Store.
func (m *MemoryStore) Delete(_ context.Context, r *Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur, ok := m.records[r.SID]; ok && cur.version == r.version {
		delete(m.records, r.SID)
	}
	return nil
}

// List implements Store.
func (m *MemoryStore) List(context.Context) ([]*Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Record, 0, len(m.records))
	for _, r := range m.records {
		out = append(out, r.clone())
	}
	return out, nil
}
