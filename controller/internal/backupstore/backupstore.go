// Package backupstore opens a TalosEtcdBackup's S3 store with the
// credentials its Secret holds, and reads an etcd restore's age identity:
// the one way the backup controller (snapshots, retention, restore markers)
// and the operation controller (the restore into the live cluster) reach a
// store. Messages name Secrets and keys, never their contents.
package backupstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup"
	"github.com/maeshinshin/ichor/contracts/pkg/etcdbackup/store"
)

// Failure is a store or Secret that cannot be used: Reason is a condition
// reason of the TalosEtcdBackup kind, Msg says what to fix.
type Failure struct{ Reason, Msg string }

func (f *Failure) Error() string { return f.Msg }

func fail(reason, format string, args ...any) *Failure {
	return &Failure{Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// Open reads the backup's credentials Secret (uncached, through r) and
// connects to its bucket; it does not reach the network.
func Open(ctx context.Context, r client.Reader, b *ichorv1alpha1.TalosEtcdBackup, transport http.RoundTripper) (*store.Store, *Failure) {
	ref := b.Spec.S3.CredentialsRef

	sec := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: ref.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fail(ichorv1alpha1.CredentialsUnavailableReason,
				"the S3 credentials Secret %q (spec.s3.credentialsRef) does not exist in namespace %q; create it with keys %s and %s",
				ref.Name, b.Namespace, store.AccessKeyIDKey, store.SecretAccessKeyKey)
		}

		return nil, fail(ichorv1alpha1.CredentialsUnavailableReason, "reading the S3 credentials Secret %q: %v", ref.Name, APIReason(err))
	}

	id, key := string(sec.Data[store.AccessKeyIDKey]), string(sec.Data[store.SecretAccessKeyKey])
	if id == "" || key == "" {
		return nil, fail(ichorv1alpha1.CredentialsUnavailableReason,
			"the S3 credentials Secret %q needs both keys %s and %s", ref.Name, store.AccessKeyIDKey, store.SecretAccessKeyKey)
	}

	st, err := store.Open(store.Destination{
		Endpoint: b.Spec.S3.Endpoint, Bucket: b.Spec.S3.Bucket, Prefix: b.Spec.S3.Prefix, Region: b.Spec.S3.Region,
		AccessKeyID: id, SecretAccessKey: key, Transport: transport,
	})
	if err != nil {
		return nil, fail(ichorv1alpha1.StoreUnavailableReason, "%v", err)
	}

	return st, nil
}

// Identities reads the age identities of an etcd restore from the Secret its
// spec.etcdRestore.identityRef names (key `identity` unless the ref names
// one). The error names the Secret and the key, never the content.
func Identities(ctx context.Context, r client.Reader, namespace string, ref ichorv1alpha1.SecretReference) ([]age.Identity, error) {
	key := ref.Key
	if key == "" {
		key = ichorv1alpha1.DefaultIdentityKey
	}

	sec := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("the identity Secret %q (spec.etcdRestore.identityRef) does not exist in namespace %q; "+
				"create it with an age identity of one of the backup's recipients (AGE-SECRET-KEY-1…) in key %q", ref.Name, namespace, key)
		}

		return nil, fmt.Errorf("reading the identity Secret %q: %s", ref.Name, APIReason(err))
	}

	data, ok := sec.Data[key]
	if !ok {
		return nil, fmt.Errorf("the identity Secret %q has no key %q; put an age identity (AGE-SECRET-KEY-1…) there", ref.Name, key)
	}

	ids, err := etcdbackup.ParseIdentities(data)
	if err != nil {
		return nil, fmt.Errorf("key %q of the identity Secret %q: %w", key, ref.Name, err)
	}

	return ids, nil
}

// APIReason is an API error's reason alone (its message may quote a request).
func APIReason(err error) string {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		return string(s.Status().Reason)
	}

	return "the API server did not answer"
}
