// Package users holds Ichor's own users: IchorUser CRs (display name, e-mail,
// roles, disabled flag) and their argon2id password hashes, one key per user
// in the Secret ichor-user-credentials of the install namespace (architecture,
// "CLI and UI"). It checks a password and sets one; it never logs either.
package users

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/alexedwards/argon2id"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// CredentialsSecret is the Secret, in the install namespace, that holds one
// argon2id hash per user, keyed by the IchorUser's name.
const CredentialsSecret = "ichor-user-credentials" //nolint:gosec // a Secret's name, not a credential

// ErrBadCredentials is returned for an unknown user and for a wrong password
// alike, so that a sign-in never tells whether a user exists.
var ErrBadCredentials = errors.New("wrong user name or password")

// ErrDisabled is returned for a user whose IchorUser is disabled or gone.
var ErrDisabled = errors.New("this user may not sign in: the IchorUser is disabled or was deleted")

// Params are the argon2id parameters of new hashes: RFC 9106's second
// recommended option (64 MiB, 3 passes, 4 lanes), which fits the backend's
// memory limit one sign-in at a time.
var Params = &argon2id.Params{Memory: 64 * 1024, Iterations: 3, Parallelism: 4, SaltLength: 16, KeyLength: 32}

// dummyHash is compared against when the user does not exist, so that an
// unknown user costs as much as a wrong password.
var dummyHash = func() string {
	h, err := argon2id.CreateHash("ichor-no-such-user", Params)
	if err != nil {
		panic(err) // only when the system's random source fails at start-up
	}
	return h
}()

// Hash returns the argon2id hash (PHC string) of password.
func Hash(password string) (string, error) {
	if password == "" {
		return "", errors.New("the password is empty: give one of at least 12 characters")
	}
	if len(password) < 12 {
		return "", errors.New("the password is shorter than 12 characters: give a longer one")
	}
	return argon2id.CreateHash(password, Params)
}

// GeneratePassword returns a random password (24 characters, 144 bits).
func GeneratePassword() (string, error) {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

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

// SetPassword stores the hash of password for the IchorUser name in the
// credentials Secret of namespace, creating the Secret when it is missing. c
// needs get, create and update on that Secret (the demo and the CLI use an
// administrator's client; ichor-ui itself only reads it). The user must exist.
func SetPassword(ctx context.Context, c client.Client, namespace, name, password string) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("user name %q is not a valid IchorUser name: %v", name, errs)
	}
	u := &ichorv1alpha1.IchorUser{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("no IchorUser %s/%s: create the user before setting a password", namespace, name)
		}
		return fmt.Errorf("reading IchorUser %s/%s: %w", namespace, name, err)
	}
	hash, err := Hash(password)
	if err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &corev1.Secret{}
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: CredentialsSecret}, s)
		if apierrors.IsNotFound(err) {
			s = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: CredentialsSecret,
					Labels: map[string]string{"app.kubernetes.io/part-of": "ichor"}},
				Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{name: []byte(hash)},
			}
			if err := c.Create(ctx, s); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return apierrors.NewConflict(corev1.Resource("secrets"), CredentialsSecret, err)
				}
				return fmt.Errorf("creating Secret %s/%s: %w", namespace, CredentialsSecret, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading Secret %s/%s: %w", namespace, CredentialsSecret, err)
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		s.Data[name] = []byte(hash)
		return c.Update(ctx, s)
	})
}

// CreateWithPassword creates the IchorUser name with roles (when missing),
// sets a generated password and returns it, for the demo to print once.
func CreateWithPassword(ctx context.Context, c client.Client, namespace, name, displayName string, roles ...string) (string, error) {
	u := &ichorv1alpha1.IchorUser{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       ichorv1alpha1.IchorUserSpec{DisplayName: displayName, Roles: roles},
	}
	if err := c.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating IchorUser %s/%s: %w", namespace, name, err)
	}
	pw, err := GeneratePassword()
	if err != nil {
		return "", err
	}
	if err := SetPassword(ctx, c, namespace, name, pw); err != nil {
		return "", err
	}
	return pw, nil
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
