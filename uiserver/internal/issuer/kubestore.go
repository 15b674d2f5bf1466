package issuer

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/uiserver/internal/identity"
)

// KubeStore keeps the sessions as IchorUISession objects in Ichor's
// namespace, shared by every ichor-ui replica. Get reads the API server
// directly, so a code or refresh token is judged on the session as it is
// now; Update is a compare-and-swap on the resourceVersion, so of two
// replicas presenting the same code or refresh token one wins and the other
// sees it used. Peek and List read the cache (a watch), which learns a
// revocation made on another replica within the watch's delay; a session
// not in the cache yet is read directly.
type KubeStore struct {
	// Client writes and reads directly (ichor-ui's own identity).
	Client client.Client
	// Cache reads through the watch.
	Cache client.Reader
	// Namespace is Ichor's namespace.
	Namespace string
}

// The sessions' label, for a person who lists them.
const sessionComponent = "sign-in-session"

// Create implements Store.
func (k *KubeStore) Create(ctx context.Context, r *Record) error {
	o := k.object(r)
	toObject(r, o)
	if err := k.Client.Create(ctx, o); err != nil {
		return fmt.Errorf("storing the sign-in session: %w", err)
	}
	r.version = o.ResourceVersion
	return nil
}

// Get implements Store.
func (k *KubeStore) Get(ctx context.Context, sid string) (*Record, error) {
	return k.get(ctx, k.Client, sid)
}

// Peek implements Store.
func (k *KubeStore) Peek(ctx context.Context, sid string) (*Record, error) {
	r, err := k.get(ctx, k.Cache, sid)
	if errors.Is(err, ErrNoSession) {
		return k.get(ctx, k.Client, sid) // made on another replica a moment ago
	}
	return r, err
}

func (k *KubeStore) get(ctx context.Context, rd client.Reader, sid string) (*Record, error) {
	o := &ichorv1alpha1.IchorUISession{}
	err := rd.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: sid}, o)
	switch {
	case apierrors.IsNotFound(err):
		return nil, ErrNoSession
	case err != nil:
		return nil, fmt.Errorf("reading the sign-in session: %w", err)
	}
	return fromObject(o), nil
}

// Update implements Store.
func (k *KubeStore) Update(ctx context.Context, r *Record) error {
	o := k.object(r)
	o.ResourceVersion = r.version // the API server refuses the write if it changed since
	toObject(r, o)
	switch err := k.Client.Update(ctx, o); {
	case apierrors.IsConflict(err):
		return ErrConflict
	case apierrors.IsNotFound(err):
		return ErrNoSession
	case err != nil:
		return fmt.Errorf("writing the sign-in session: %w", err)
	}
	r.version = o.ResourceVersion
	return nil
}

func (k *KubeStore) object(r *Record) *ichorv1alpha1.IchorUISession {
	return &ichorv1alpha1.IchorUISession{ObjectMeta: metav1.ObjectMeta{Name: r.SID, Namespace: k.Namespace,
		Labels: map[string]string{"app.kubernetes.io/part-of": "ichor", "app.kubernetes.io/component": sessionComponent}}}
}

// Delete implements Store.
func (k *KubeStore) Delete(ctx context.Context, r *Record) error {
	err := k.Client.Delete(ctx, &ichorv1alpha1.IchorUISession{ObjectMeta: metav1.ObjectMeta{Name: r.SID, Namespace: k.Namespace}},
		client.Preconditions{ResourceVersion: &r.version})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting the sign-in session: %w", err)
	}
	return nil
}

// List implements Store.
func (k *KubeStore) List(ctx context.Context) ([]*Record, error) {
	l := &ichorv1alpha1.IchorUISessionList{}
	if err := k.Cache.List(ctx, l, client.InNamespace(k.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the sign-in sessions: %w", err)
	}
	out := make([]*Record, 0, len(l.Items))
	for i := range l.Items {
		out = append(out, fromObject(&l.Items[i]))
	}
	return out, nil
}

func toObject(r *Record, o *ichorv1alpha1.IchorUISession) {
	o.Spec = ichorv1alpha1.IchorUISessionSpec{
		Username: r.ID.Username, Groups: r.ID.Groups, Fingerprint: r.Fingerprint, Client: r.Client, Scopes: r.Scopes,
		AuthTime: metav1.NewTime(r.AuthTime), Expires: metav1.NewTime(r.Expires),
		Code: ichorv1alpha1.IchorUISessionCode{Hash: r.Code.Hash, Expires: metav1.NewTime(r.Code.Expires),
			RedirectURI: r.Code.Redirect, Nonce: r.Code.Nonce, Challenge: r.Code.Challenge, Used: r.Code.Used},
		RefreshHash: r.RefreshHash, UsedRefreshHashes: r.UsedRefresh, Revoked: r.Revoked, Ended: r.Ended,
	}
}

func fromObject(o *ichorv1alpha1.IchorUISession) *Record {
	s := o.Spec
	r := &Record{
		SID: o.Name, ID: identity.Identity{Username: s.Username, Groups: s.Groups}, Fingerprint: s.Fingerprint,
		Client: s.Client, Scopes: s.Scopes, AuthTime: s.AuthTime.Time, Expires: s.Expires.Time,
		Code: CodeRecord{Hash: s.Code.Hash, Expires: s.Code.Expires.Time, Redirect: s.Code.RedirectURI,
			Nonce: s.Code.Nonce, Challenge: s.Code.Challenge, Used: s.Code.Used},
		RefreshHash: s.RefreshHash, UsedRefresh: s.UsedRefreshHashes, Revoked: s.Revoked, Ended: s.Ended,
		version: o.ResourceVersion,
	}
	return r.clone()
}
