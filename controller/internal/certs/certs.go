// Package certs keeps the serving certificate of the controller's admission
// webhooks without any other component: a self-signed CA and a leaf for the
// webhook Service live in one Secret in Ichor's namespace, the leaf is written
// to the webhook server's certificate directory, and the CA is patched into the
// caBundle of the ValidatingWebhookConfiguration and the
// MutatingWebhookConfiguration. Both replicas run it at start; the
// first to create the Secret wins and the other reads it. A leaf that is close
// to expiry is renewed from the same CA, so the caBundle does not change.
package certs

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The controller reads and writes its own serving Secret, and patches the caBundle.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update,namespace=ichor-system
// Only Ichor's own two configurations (the names cmd/main.go defaults to and the chart sets).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,verbs=get;update;patch,resourceNames=ichor-validating-webhook;ichor-mutating-webhook

// Secret keys.
const (
	// CACertKey holds the PEM CA certificate.
	CACertKey = "ca.crt"
	// CAKeyKey holds the PEM CA private key.
	CAKeyKey = "ca.key"
	// CertKey holds the PEM leaf certificate (the name the webhook server reads).
	CertKey = corev1.TLSCertKey
	// KeyKey holds the PEM leaf private key.
	KeyKey = corev1.TLSPrivateKeyKey
)

const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 365 * 24 * time.Hour
	// renewBefore is how long before expiry a leaf is renewed.
	renewBefore = 30 * 24 * time.Hour
)

// Options say where the certificate lives and what it is for.
type Options struct {
	// Namespace and SecretName locate the Secret.
	Namespace  string
	SecretName string
	// ServiceName is the webhook Service; the leaf is valid for its DNS names.
	ServiceName string
	// WebhookConfiguration is the ValidatingWebhookConfiguration whose caBundle is set.
	WebhookConfiguration string
	// MutatingWebhookConfiguration is the MutatingWebhookConfiguration whose
	// caBundle is set; empty means none.
	MutatingWebhookConfiguration string
	// CertDir is where tls.crt and tls.key are written for the webhook server.
	CertDir string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Ensure makes sure the Secret holds a valid CA and leaf, writes the leaf to
// CertDir and sets the caBundles. It is safe to run from several replicas.
func Ensure(ctx context.Context, c client.Client, opts Options) error {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	secret, err := ensureSecret(ctx, c, opts)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(opts.CertDir, 0o700); err != nil {
		return err
	}
	for _, k := range []string{CertKey, KeyKey} {
		if err := os.WriteFile(filepath.Join(opts.CertDir, k), secret.Data[k], 0o600); err != nil {
			return err
		}
	}
	ca := secret.Data[CACertKey]
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	err = patchCABundle(ctx, c, "ValidatingWebhookConfiguration", opts.WebhookConfiguration, validating, func() []*admissionregistrationv1.WebhookClientConfig {
		out := make([]*admissionregistrationv1.WebhookClientConfig, 0, len(validating.Webhooks))
		for i := range validating.Webhooks {
			out = append(out, &validating.Webhooks[i].ClientConfig)
		}
		return out
	}, ca)
	if err != nil || opts.MutatingWebhookConfiguration == "" {
		return err
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	return patchCABundle(ctx, c, "MutatingWebhookConfiguration", opts.MutatingWebhookConfiguration, mutating, func() []*admissionregistrationv1.WebhookClientConfig {
		out := make([]*admissionregistrationv1.WebhookClientConfig, 0, len(mutating.Webhooks))
		for i := range mutating.Webhooks {
			out = append(out, &mutating.Webhooks[i].ClientConfig)
		}
		return out
	}, ca)
}

func ensureSecret(ctx context.Context, c client.Client, opts Options) (*corev1.Secret, error) {
	key := client.ObjectKey{Namespace: opts.Namespace, Name: opts.SecretName}
	for attempt := 0; attempt < 5; attempt++ {
		secret := &corev1.Secret{}
		err := c.Get(ctx, key, secret)
		switch {
		case apierrors.IsNotFound(err):
			data, err := issue(nil, opts)
			if err != nil {
				return nil, err
			}
			secret = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.SecretName,
					Labels: map[string]string{"app.kubernetes.io/part-of": "ichor", "app.kubernetes.io/component": "webhook-serving-certificate"}},
				Type: corev1.SecretTypeTLS,
				Data: data,
			}
			if err := c.Create(ctx, secret); err != nil {
				if apierrors.IsAlreadyExists(err) {
					continue // the other replica won; read its Secret
				}
				return nil, fmt.Errorf("creating Secret %s: %w", key, err)
			}
			return secret, nil
		case err != nil:
			return nil, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		if valid(secret.Data, opts) {
			return secret, nil
		}
		data, err := issue(secret.Data, opts)
		if err != nil {
			return nil, err
		}
		secret.Data = data
		if err := c.Update(ctx, secret); err != nil {
			if apierrors.IsConflict(err) {
				continue
			}
			return nil, fmt.Errorf("renewing Secret %s: %w", key, err)
		}
		return secret, nil
	}
	return nil, fmt.Errorf("secret %s keeps changing under us; is another controller writing it?", key)
}

// dnsNames are the names the webhook Service is reached by.
func dnsNames(opts Options) []string {
	return []string{
		opts.ServiceName + "." + opts.Namespace + ".svc",
		opts.ServiceName + "." + opts.Namespace + ".svc.cluster.local",
	}
}

// valid reports whether data holds a CA and a leaf signed by it, valid for
// the Service's names for longer than renewBefore.
func valid(data map[string][]byte, opts Options) bool {
	ca, _, err := parsePair(data[CACertKey], data[CAKeyKey])
	if err != nil {
		return false
	}
	leaf, _, err := parsePair(data[CertKey], data[KeyKey])
	if err != nil {
		return false
	}
	if leaf.CheckSignatureFrom(ca) != nil || opts.Now().Add(renewBefore).After(leaf.NotAfter) {
		return false
	}
	for _, n := range dnsNames(opts) {
		if leaf.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

// issue returns Secret data with a leaf signed by the CA in old (or by a new
// CA when old holds none that is usable).
func issue(old map[string][]byte, opts Options) (map[string][]byte, error) {
	now := opts.Now()
	caCert, caKey, err := parsePair(old[CACertKey], old[CAKeyKey])
	caPEM, caKeyPEM := old[CACertKey], old[CAKeyKey]
	if err != nil || now.Add(leafLifetime).After(caCert.NotAfter) {
		caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber:          serial(),
			Subject:               pkix.Name{CommonName: "ichor-webhook-ca", Organization: []string{"ichor"}},
			NotBefore:             now.Add(-time.Hour),
			NotAfter:              now.Add(caLifetime),
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
			BasicConstraintsValid: true,
			IsCA:                  true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		if caCert, err = x509.ParseCertificate(der); err != nil {
			return nil, err
		}
		caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		if caKeyPEM, err = encodeKey(caKey); err != nil {
			return nil, err
		}
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	names := dnsNames(opts)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	leafKeyPEM, err := encodeKey(leafKey)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		CACertKey: caPEM,
		CAKeyKey:  caKeyPEM,
		CertKey:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyKey:    leafKeyPEM,
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return n
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("missing PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// patchCABundle reads the webhook configuration (kind) name into cfg and sets the
// caBundle of every client configuration clientConfigs returns (pointers
// into cfg) to ca.
func patchCABundle(ctx context.Context, c client.Client, kind, name string, cfg client.Object,
	clientConfigs func() []*admissionregistrationv1.WebhookClientConfig, ca []byte) error {
	if err := c.Get(ctx, client.ObjectKey{Name: name}, cfg); err != nil {
		return fmt.Errorf("reading %s %s: %w", kind, name, err)
	}
	patch := client.MergeFrom(cfg.DeepCopyObject().(client.Object))
	changed := false
	for _, cc := range clientConfigs() {
		if !bytes.Equal(cc.CABundle, ca) {
			cc.CABundle = ca
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := c.Patch(ctx, cfg, patch); err != nil {
		return fmt.Errorf("setting the caBundle of %s %s: %w", kind, name, err)
	}
	return nil
}
