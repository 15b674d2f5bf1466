// Package users holds Ichor's own users: IchorUser CRs (display name, e-mail,
// roles, disabled flag) and their argon2id password hashes, one key per user
// in the Secret ichor-user-credentials of the install namespace (architecture,
// "CLI and UI"). It checks a password and sets one; it never logs either.
package users

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/alexedwards/argon2id"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/userpass"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// CredentialsSecret is the Secret that holds the hashes (userpass.CredentialsSecret).
const CredentialsSecret = userpass.CredentialsSecret

// ErrBadCredentials is returned for an unknown user and for a wrong password
// alike, so that a sign-in never tells whether a user exists.
var ErrBadCredentials = errors.New("wrong user name or password")

// ErrDisabled is returned for a user whose IchorUser is disabled or gone.
var ErrDisabled = errors.New("this user may not sign in: the IchorUser is disabled or was deleted")

// dummyHash is compared against when the user does not exist, so that an
// unknown user costs as much as a wrong password.
var dummyHash = func() string {
	h, err := argon2id.CreateHash("ichor-no-such-user", userpass.Params)
	if err != nil {
		panic(err) // only when the system's random source fails at start-up
	}
	return h
}()

// Groups are the Kubernetes groups of u: ichor:<role> for each role.
func Groups(u *ichorv1alpha1.IchorUser) []string {
	out := make([]string, 0, len(u.Spec.Roles))
	for _, r := range u.Spec.Roles {
		out = append(out, identity.IchorPrefix+r)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Identity is the Kubernetes identity of u: ichor:<name> and its groups.
func Identity(u *ichorv1alpha1.IchorUser) identity.Identity {
	return identity.Identity{Username: identity.IchorPrefix + u.Name, Groups: Groups(u)}
}

// ErrBusy is returned when every password-hash slot is taken: the sign-in
// is refused at once (429) rather than queued.
var ErrBusy = errors.New("ichor-ui is checking too many sign-ins right now; try again in a few seconds")

// Store checks sign-ins against the IchorUsers and the credentials Secret of
// Namespace. Reader needs get on IchorUsers and on that one Secret; it
// should not be a cache (the backend may not list Secrets).
type Store struct {
	// Reader reads IchorUsers and the credentials Secret.
	Reader client.Reader
	// Namespace is the install namespace.
	Namespace string

	// Slots bound the argon2id comparisons running at once; nil means
	// DefaultHashSlots of them. A sign-in that finds them all taken gets ErrBusy.
	Slots chan struct{}

	once sync.Once
}

// DefaultHashSlots bounds the argon2id comparisons running at once (64 MiB
// each), so that a burst of sign-ins cannot exhaust the backend's memory.
const DefaultHashSlots = 2

// compare checks password against hash when a slot is free, and gives
// ErrBusy at once when none is: a sign-in never waits in a queue.
func (s *Store) compare(ctx context.Context, password, hash string) (bool, error) {
	s.once.Do(func() {
		if s.Slots == nil {
			s.Slots = make(chan struct{}, DefaultHashSlots)
		}
	})
	if err := ctx.Err(); err != nil {
		return false, err
	}
	select {
	case s.Slots <- struct{}{}:
	default:
		return false, ErrBusy
	}
	defer func() { <-s.Slots }()
	return argon2id.ComparePasswordAndHash(password, hash)
}

// fingerprint names a stored hash without revealing it: a session keeps it
// and ends when the stored hash changes (a new password).
func fingerprint(hash []byte) string {
	sum := sha256.Sum256(hash)
	return hex.EncodeToString(sum[:])
}

// Authenticate checks name and password and returns the user's identity and
// the fingerprint of the password's hash (see Fingerprints). An unknown user
// and a wrong password both give ErrBadCredentials; no free hash slot gives
// ErrBusy.
func (s *Store) Authenticate(ctx context.Context, name, password string) (identity.Identity, string, error) {
	if name == "" || password == "" || len(validation.IsDNS1123Subdomain(name)) > 0 {
		if _, err := s.compare(ctx, password, dummyHash); errors.Is(err, ErrBusy) {
			return identity.Identity{}, "", ErrBusy
		}
		return identity.Identity{}, "", ErrBadCredentials
	}
	u := &ichorv1alpha1.IchorUser{}
	uerr := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, u)
	if uerr != nil && !apierrors.IsNotFound(uerr) {
		return identity.Identity{}, "", fmt.Errorf("reading the user: %w", uerr)
	}
	hash := dummyHash
	if uerr == nil {
		sec := &corev1.Secret{}
		err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: CredentialsSecret}, sec)
		if err != nil && !apierrors.IsNotFound(err) {
			return identity.Identity{}, "", fmt.Errorf("reading the credentials Secret %s: %w", CredentialsSecret, err)
		}
		if h, ok := sec.Data[name]; ok && len(h) > 0 {
			hash = string(h)
		} else {
			uerr = errors.New("no password set")
		}
	}
	match, err := s.compare(ctx, password, hash)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrBusy) {
		return identity.Identity{}, "", err
	}
	if err != nil {
		// A malformed hash in the Secret: say so without echoing it.
		return identity.Identity{}, "", fmt.Errorf("the stored hash of this user is not an argon2id hash: set the password again")
	}
	if uerr != nil || !match {
		return identity.Identity{}, "", ErrBadCredentials
	}
	if u.Spec.Disabled {
		return identity.Identity{}, "", ErrDisabled
	}
	return Identity(u), fingerprint([]byte(hash)), nil
}

// Lookup returns the current identity of user name (ichor:<name> without the
// prefix): the roles as they are now. A disabled or deleted user gives ErrDisabled.
func (s *Store) Lookup(ctx context.Context, name string) (identity.Identity, error) {
	u := &ichorv1alpha1.IchorUser{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return identity.Identity{}, ErrDisabled
		}
		return identity.Identity{}, fmt.Errorf("reading the user: %w", err)
	}
	if u.Spec.Disabled {
		return identity.Identity{}, ErrDisabled
	}
	return Identity(u), nil
}

// Fingerprints returns, for each name, the fingerprint of the user's stored
// password hash, or "" when the user may no longer be signed in: disabled,
// deleted or without a password. A session whose fingerprint differs ends
// (a new password, a disabled user). It reads the credentials Secret once.
func (s *Store) Fingerprints(ctx context.Context, names []string) (map[string]string, error) {
	sec := &corev1.Secret{}
	if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: CredentialsSecret}, sec); err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading the credentials Secret %s: %w", CredentialsSecret, err)
	}
	out := make(map[string]string, len(names))
	for _, name := range names {
		u := &ichorv1alpha1.IchorUser{}
		if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, u); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("reading the user: %w", err)
			}
			out[name] = ""
			continue
		}
		if h := sec.Data[name]; len(h) > 0 && !u.Spec.Disabled {
			out[name] = fingerprint(h)
		} else {
			out[name] = ""
		}
	}
	return out, nil
}
