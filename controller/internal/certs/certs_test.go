package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/tools/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start(testenv.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cannot start the test API server: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func setup(t *testing.T, name string) Options {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "certs-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	none := admissionregistrationv1.SideEffectClassNone
	hook := func(n string) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name:                    n,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns.Name, Name: "ichor-webhook"}},
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			// Matches nothing, so the test server's other writes never call it.
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.invalid"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}},
			}},
		}
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{hook("a.example.invalid"), hook("b.example.invalid")},
	}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, h := range cfg.Webhooks {
		mutating.Webhooks = append(mutating.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name: h.Name, ClientConfig: h.ClientConfig, SideEffects: h.SideEffects,
			AdmissionReviewVersions: h.AdmissionReviewVersions, Rules: h.Rules,
		})
	}
	if err := env.Client.Create(ctx, mutating); err != nil {
		t.Fatal(err)
	}
	return Options{ //nolint:gosec // a Secret name, not a credential
		Namespace: ns.Name, SecretName: "ichor-webhook-tls", ServiceName: "ichor-webhook",
		WebhookConfiguration: name, MutatingWebhookConfiguration: name, CertDir: t.TempDir(),
	}
}

func readSecret(t *testing.T, opts Options) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: opts.Namespace, Name: opts.SecretName}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// caBundles returns the caBundle of every webhook of the Validating- and the
// MutatingWebhookConfiguration name, in that order.
func caBundles(t *testing.T, name string) [][]byte {
	t.Helper()
	ctx := context.Background()
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, cfg); err != nil {
		t.Fatal(err)
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, mutating); err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, 0, len(cfg.Webhooks)+len(mutating.Webhooks))
	for _, w := range cfg.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	for _, w := range mutating.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out
}

// verifyServing checks that the files in dir form a leaf the CA trusts for the Service name.
func verifyServing(t *testing.T, opts Options, caPEM []byte) *x509.Certificate {
	t.Helper()
	certPEM, err := os.ReadFile(filepath.Join(opts.CertDir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(filepath.Join(opts.CertDir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("the caBundle is not a PEM certificate")
	}
	name := opts.ServiceName + "." + opts.Namespace + ".svc"
	now := time.Now()
	if opts.Now != nil {
		now = opts.Now()
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: now}); err != nil {
		t.Fatalf("the serving certificate does not verify for %s against the caBundle: %v", name, err)
	}
	return leaf
}

func TestEnsureIssuesWritesAndPatches(t *testing.T) {
	ctx := context.Background()
	opts := setup(t, "ichor-test-issue")
	if err := Ensure(ctx, env.Client, opts); err != nil {
		t.Fatal(err)
	}
	s := readSecret(t, opts)
	bundles := caBundles(t, opts.WebhookConfiguration)
	if len(bundles) != 4 {
		t.Fatalf("want the caBundles of two validating and two mutating webhooks, got %d", len(bundles))
	}
	for i, b := range bundles {
		if !bytes.Equal(b, s.Data[CACertKey]) {
			t.Fatalf("webhook %d: every webhook's caBundle, validating and mutating, must be the Secret's CA", i)
		}
	}
	verifyServing(t, opts, s.Data[CACertKey])

	// A second start changes nothing.
	if err := Ensure(ctx, env.Client, opts); err != nil {
		t.Fatal(err)
	}
	if again := readSecret(t, opts); again.ResourceVersion != s.ResourceVersion {
		t.Fatal("a valid Secret must not be rewritten")
	}
}

func TestEnsureRenewsTheLeafFromTheSameCA(t *testing.T) {
	ctx := context.Background()
	opts := setup(t, "ichor-test-renew")
	if err := Ensure(ctx, env.Client, opts); err != nil {
		t.Fatal(err)
	}
	before := readSecret(t, opts)
	opts.Now = func() time.Time { return time.Now().Add(340 * 24 * time.Hour) } // within renewBefore of the leaf's expiry
	if err := Ensure(ctx, env.Client, opts); err != nil {
		t.Fatal(err)
	}
	after := readSecret(t, opts)
	if bytes.Equal(before.Data[CertKey], after.Data[CertKey]) {
		t.Fatal("a leaf close to expiry must be renewed")
	}
	if !bytes.Equal(before.Data[CACertKey], after.Data[CACertKey]) {
		t.Fatal("renewing the leaf must keep the CA, so the caBundle does not change")
	}
	leaf := verifyServing(t, opts, caBundles(t, opts.WebhookConfiguration)[0])
	verifyServing(t, opts, caBundles(t, opts.WebhookConfiguration)[3])
	if !leaf.NotAfter.After(time.Now().Add(700 * 24 * time.Hour)) {
		t.Fatalf("the renewed leaf should run a year from the (shifted) clock, got %s", leaf.NotAfter)
	}
}

func TestEnsureReplacesABrokenSecret(t *testing.T) {
	ctx := context.Background()
	opts := setup(t, "ichor-test-broken")
	if err := env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.SecretName},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{CertKey: []byte("garbage"), KeyKey: []byte("garbage")},
	}); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(ctx, env.Client, opts); err != nil {
		t.Fatal(err)
	}
	verifyServing(t, opts, readSecret(t, opts).Data[CACertKey])
}

// Both replicas start at once: they end with the same CA and leaf.
func TestEnsureFromTwoReplicasAgrees(t *testing.T) {
	ctx := context.Background()
	opts := setup(t, "ichor-test-race")
	other := opts
	other.CertDir = t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, o := range []Options{opts, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = Ensure(ctx, env.Client, o)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	a, _ := os.ReadFile(filepath.Join(opts.CertDir, "tls.crt"))
	b, _ := os.ReadFile(filepath.Join(other.CertDir, "tls.crt"))
	if !bytes.Equal(a, b) || !bytes.Equal(a, readSecret(t, opts).Data[CertKey]) {
		t.Fatal("both replicas must serve the certificate in the Secret")
	}
	verifyServing(t, other, caBundles(t, opts.WebhookConfiguration)[1])
}
