// Package users holds Ichor's own users: IchorUser CRs (display name, e-mail,
// roles, disabled flag) and their argon2id password hashes, one key per user
// in the Secret ichor-user-credentials of the install namespace (architecture,
// "CLI and UI"). It checks a password and sets one; it never logs either.
package users

import (
	"context"
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

// Store checks sign-ins against the IchorUsers and the credentials Secret of
// Namespace. Reader needs get on IchorUsers and on that one Secret; it
// should not be a cache (the backend may not list Secrets).
type Store struct {
	// Reader reads IchorUsers and the credentials Secret.
	Reader client.Reader
	// Namespace is the install namespace.
	Namespace string

	once sync.Once
	sem  chan struct{}
}

// maxConcurrentHashes bounds the argon2id comparisons running at once (64 MiB
// each), so that a burst of sign-ins cannot exhaust the backend's memory.
const maxConcurrentHashes = 2

// compare checks password against hash, at most maxConcurrentHashes at a time.
func (s *Store) compare(ctx context.Context, password, hash string) (bool, error) {
	s.once.Do(func() { s.sem = make(chan struct{}, maxConcurrentHashes) })
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-s.sem }()
	return argon2id.ComparePasswordAndHash(password, hash)
}

// Authenticate checks name and password and returns the user's identity. An
// unknown user and a wrong password both give ErrBadCredentials.
func (s *Store) Authenticate(ctx context.Context, name, password string) (identity.Identity, error) {
	if name == "" || password == "" || len(validation.IsDNS1123Subdomain(name)) > 0 {
		_, _ = s.compare(ctx, password, dummyHash)
		return identity.Identity{}, ErrBadCredentials
	}
	u := &ichorv1alpha1.IchorUser{}
	uerr := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: name}, u)
	if uerr != nil && !apierrors.IsNotFound(uerr) {
		return identity.Identity{}, fmt.Errorf("reading the user: %w", uerr)
	}
	hash := dummyHash
	if uerr == nil {
		sec := &corev1.Secret{}
		err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: CredentialsSecret}, sec)
		if err != nil && !apierrors.IsNotFound(err) {
			return identity.Identity{}, fmt.Errorf("reading the credentials Secret %s: %w", CredentialsSecret, err)
		}
		if h, ok := sec.Data[name]; ok && len(h) > 0 {
			hash = string(h)
		} else {
			uerr = errors.New("no password set")
		}
	}
	match, err := s.compare(ctx, password, hash)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return identity.Identity{}, err
	}
	if err != nil {
		// A malformed hash in the Secret: say so without echoing it.
		return identity.Identity{}, fmt.Errorf("the stored hash of this user is not an argon2id hash: set the password again")
	}
	if uerr != nil || !match {
		return identity.Identity{}, ErrBadCredentials
	}
	if u.Spec.Disabled {
		return identity.Identity{}, ErrDisabled
	}
	return Identity(u), nil
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
