package servingca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The signing key of ichor-ui's issuer: one ECDSA P-256 key that every
// ichor-ui replica mounts (--signing-key-file), so a token or a sealed login
// form made by one replica is good on every other. The keeper makes it once
// and replaces it only when it is missing or unreadable (which signs every
// user out: their tokens no longer verify). It is not rotated in this release.
const (
	// DefaultSigningKeySecret is the Opaque Secret holding the key.
	DefaultSigningKeySecret = "ichor-ui-signing-key"
	// SigningKeyKey is its PEM key (SEC 1).
	SigningKeyKey = "signing.key"
)

// ensureSigningKey keeps the Secret ichor-ui-signing-key.
func (k *Keeper) ensureSigningKey(ctx context.Context) error {
	key := client.ObjectKey{Namespace: k.Namespace, Name: DefaultSigningKeySecret}
	secret := &corev1.Secret{}
	err := k.Reader.Get(ctx, key, secret)
	switch {
	case apierrors.IsNotFound(err):
		pemKey, err := newSigningKey()
		if err != nil {
			return err
		}
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: DefaultSigningKeySecret, Labels: k.labels("ichor-ui-signing-key")},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{SigningKeyKey: pemKey},
		}
		if err := k.Client.Create(ctx, secret); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return errRetry
			}
			return fmt.Errorf("creating Secret %s: %w", key, err)
		}
		k.Log.Info("made ichor-ui's token signing key", "secret", key.String())
		return nil
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if validSigningKey(secret.Data[SigningKeyKey]) {
		return nil
	}
	pemKey, err := newSigningKey()
	if err != nil {
		return err
	}
	if secret.Data == nil {
		secret.Data = map[string][]byte{}
	}
	secret.Data[SigningKeyKey] = pemKey
	if err := k.Client.Update(ctx, secret); err != nil {
		if apierrors.IsConflict(err) {
			return errRetry
		}
		return fmt.Errorf("updating Secret %s: %w", key, err)
	}
	k.Log.Info("replaced ichor-ui's unreadable token signing key; its users sign in again", "secret", key.String())
	return nil
}

func newSigningKey() ([]byte, error) {
	sk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return encodeKey(sk)
}

// validSigningKey reports whether b is a PEM ECDSA P-256 key ichor-ui reads.
func validSigningKey(b []byte) bool {
	block, _ := pem.Decode(b)
	if block == nil {
		return false
	}
	sk, err := x509.ParseECPrivateKey(block.Bytes)
	return err == nil && sk.Curve == elliptic.P256()
}
