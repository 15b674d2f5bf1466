// Package userpass sets the passwords of Ichor's own users (IchorUser CRs):
// argon2id hashes, one key per user in the Secret ichor-user-credentials of
// the install namespace (architecture, "CLI and UI"). The CLI and the demo
// write them with an administrator's client; ichor-ui only reads them to
// check a sign-in. Nothing here logs or returns a hash, and a password leaves
// only as the return value of Generate.
package userpass

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/alexedwards/argon2id"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// CredentialsSecret is the Secret, in the install namespace, that holds one
// argon2id hash per user, keyed by the IchorUser's name.
const CredentialsSecret = "ichor-user-credentials" //nolint:gosec // a Secret's name, not a credential

// MinLength is the shortest password accepted.
const MinLength = 12

// Params are the argon2id parameters of new hashes: RFC 9106's second
// recommended option (64 MiB, 3 passes, 4 lanes), which fits ichor-ui's
// memory limit one sign-in at a time.
var Params = &argon2id.Params{Memory: 64 * 1024, Iterations: 3, Parallelism: 4, SaltLength: 16, KeyLength: 32}

// Hash returns the argon2id hash (PHC string) of password.
func Hash(password string) (string, error) {
	if password == "" {
		return "", fmt.Errorf("the password is empty: give one of at least %d characters", MinLength)
	}
	if len(password) < MinLength {
		return "", fmt.Errorf("the password is shorter than %d characters: give a longer one", MinLength)
	}
	return argon2id.CreateHash(password, Params)
}

// Generate returns a random password (24 characters, 144 bits).
func Generate() (string, error) {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// ValidateName checks that name can be an IchorUser's name.
func ValidateName(name string) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("user name %q is not a valid IchorUser name (lower-case letters, digits, '-' and '.'): %v", name, errs)
	}
	return nil
}

// Set stores the hash of password for the IchorUser name in the credentials
// Secret of namespace, creating the Secret when it is missing. c needs get,
// create and update on that Secret. The user must exist.
func Set(ctx context.Context, c client.Client, namespace, name, password string) error {
	if err := ValidateName(name); err != nil {
		return err
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

// ErrUserExists is returned by Create for a user that exists already.
var ErrUserExists = errors.New("the IchorUser exists already")

// ErrPasswordNotStored wraps a failure to store a new user's password; the
// user was deleted again.
var ErrPasswordNotStored = errors.New("the password could not be stored, so the new IchorUser was deleted again")

// Roles are the roles an IchorUser may hold, each the group ichor:<role>.
var Roles = []string{ichorv1alpha1.UserRoleViewer, ichorv1alpha1.UserRoleOperator, ichorv1alpha1.UserRoleAdmin}

// CheckRoles refuses an empty list of roles and any role that is not one of Roles.
func CheckRoles(roles []string) error {
	if len(roles) == 0 {
		return fmt.Errorf("give the user one or more roles: %s", strings.Join(Roles, ", "))
	}
	for _, r := range roles {
		if !slices.Contains(Roles, r) {
			return fmt.Errorf("role %q is not a role: use %s", r, strings.Join(Roles, ", "))
		}
	}
	return nil
}

// Create creates the IchorUser name with roles, sets a generated password and
// returns it, to be shown once. An existing user gives ErrUserExists and is
// left as it is; when setting the password fails, the new user is deleted
// again, so that nothing is half-created.
func Create(ctx context.Context, c client.Client, namespace string, spec ichorv1alpha1.IchorUserSpec, name string) (string, error) {
	return CreateAs(ctx, c, c, namespace, spec, name)
}

// CreateAs is Create with the IchorUser written (and deleted again) by users
// (ichor-ui: the signed-in person) and the password stored by passwords
// (ichor-ui's own identity, which may write ichor-user-credentials).
func CreateAs(ctx context.Context, users, passwords client.Client, namespace string, spec ichorv1alpha1.IchorUserSpec, name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	pw, err := Generate()
	if err != nil {
		return "", err
	}
	u := &ichorv1alpha1.IchorUser{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: spec}
	if err := users.Create(ctx, u); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("%w: %s/%s", ErrUserExists, namespace, name)
		}
		return "", fmt.Errorf("creating IchorUser %s/%s: %w", namespace, name, err)
	}
	if err := Set(ctx, passwords, namespace, name, pw); err != nil {
		if derr := users.Delete(context.WithoutCancel(ctx), u); derr != nil && !apierrors.IsNotFound(derr) {
			return "", fmt.Errorf("%w (and deleting the new IchorUser again failed: %w): %w", ErrPasswordNotStored, derr, err)
		}
		return "", fmt.Errorf("%w: %w", ErrPasswordNotStored, err)
	}
	return pw, nil
}
