package servingca

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/tools/testenv"
)

var (
	suite *testenv.Suite
	k8s   client.Client
	logs  syncBuffer
	nsSeq atomic.Int32
)

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestMain(m *testing.M) {
	// Everything the keeper logs is kept and checked for key material.
	os.Exit(testenv.Main(m, testenv.SuiteOptions{LogTo: &logs}, func(_ context.Context, s *testenv.Suite) (func(), error) {
		suite, k8s = s, s.Env.Client
		return nil, nil
	}))
}

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newKeeper makes a namespace of its own and a keeper for it on a test clock.
func newKeeper(t *testing.T) (*Keeper, *clock) {
	t.Helper()
	ns := fmt.Sprintf("servingca-%d", nsSeq.Add(1))
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	c := &clock{now: time.Now()}
	return &Keeper{Client: k8s, Reader: k8s, Namespace: ns, Now: c.Now, Log: ctrl.Log.WithName("serving-ca-test")}, c
}

type state struct {
	ca, leaf, public *corev1.Secret
	cm               *corev1.ConfigMap
}

func read(t *testing.T, k *Keeper) state {
	t.Helper()
	ctx := context.Background()
	s := state{ca: &corev1.Secret{}, leaf: &corev1.Secret{}, public: &corev1.Secret{}, cm: &corev1.ConfigMap{}}
	for name, obj := range map[string]client.Object{DefaultCASecret: s.ca, DefaultLeafSecret: s.leaf, DefaultPublicName + "/secret": s.public, DefaultPublicName: s.cm} {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: strings.TrimSuffix(name, "/secret")}, obj); err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
	}
	return s
}

func ensure(t *testing.T, k *Keeper) time.Time {
	t.Helper()
	next, err := k.Ensure(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return next
}

func pool(t *testing.T, pemBytes []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("no certificate in %q", pemBytes)
	}
	return p
}

func leafCert(t *testing.T, s *corev1.Secret) *x509.Certificate {
	t.Helper()
	c, err := parseLeaf(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// verifies checks that leaf verifies for every Service name against the
// bundle, at the keeper's time.
func verifies(t *testing.T, k *Keeper, leaf *x509.Certificate, caBundle []byte) {
	t.Helper()
	for _, n := range k.DNSNames() {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: n, Roots: pool(t, caBundle), CurrentTime: k.Now(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the leaf does not verify for %s against the published CA: %v", n, err)
		}
	}
}

func TestEnsureMakesCALeafAndPublicCA(t *testing.T) {
	k, c := newKeeper(t)
	next := ensure(t, k)
	s := read(t, k)

	ca := parseAuthority(s.ca.Data[CACertKey], s.ca.Data[CAKeyKey])
	if ca == nil {
		t.Fatal("the CA Secret holds no usable CA")
	}
	if ca.cert.PublicKeyAlgorithm != x509.ECDSA || ca.key.Curve.Params().Name != "P-256" {
		t.Errorf("the CA is %v on %s, want ECDSA P-256", ca.cert.PublicKeyAlgorithm, ca.key.Curve.Params().Name)
	}
	if life := ca.cert.NotAfter.Sub(c.Now()); life < 9*365*24*time.Hour {
		t.Errorf("the CA lives %v, want a long-lived one", life)
	}
	if s.leaf.Type != corev1.SecretTypeTLS {
		t.Errorf("the leaf Secret is of type %s", s.leaf.Type)
	}
	leaf := leafCert(t, s.leaf)
	want := []string{"ichor-ui", "ichor-ui." + k.Namespace, "ichor-ui." + k.Namespace + ".svc", "ichor-ui." + k.Namespace + ".svc.cluster.local"}
	if !sameNames(leaf, want) {
		t.Errorf("the leaf is for %v, want %v", leaf.DNSNames, want)
	}
	if life := leaf.NotAfter.Sub(c.Now()); life < 89*24*time.Hour || life > 91*24*time.Hour {
		t.Errorf("the leaf lives %v, want 90 days", life)
	}
	verifies(t, k, leaf, []byte(s.cm.Data[CACertKey]))
	verifies(t, k, leaf, s.public.Data[CACertKey])
	if !bytes.Equal(s.leaf.Data[CACertKey], s.public.Data[CACertKey]) {
		t.Error("the leaf Secret's ca.crt is not the published bundle")
	}

	// The published objects hold the public part only.
	if len(s.public.Data) != 1 || len(s.cm.Data) != 1 || len(s.cm.BinaryData) != 0 {
		t.Errorf("the published CA holds more than ca.crt: Secret %v, ConfigMap %v", keys(s.public.Data), s.cm.Data)
	}
	for _, text := range []string{string(s.public.Data[CACertKey]), s.cm.Data[CACertKey]} {
		if strings.Contains(text, "PRIVATE KEY") {
			t.Fatal("the published CA holds a private key")
		}
	}

	// The next run is at the leaf's renewal, two thirds into its life.
	if d := next.Sub(c.Now()); d > k.Resync {
		t.Errorf("next run in %v, beyond Resync %v", d, k.Resync)
	}
	k.Resync = 365 * 24 * time.Hour
	next = ensure(t, k)
	if got, wantAt := next, renewAt(leaf); !got.Equal(wantAt) {
		t.Errorf("next run at %v, want the renewal time %v", got, wantAt)
	}
	if d := renewAt(leaf).Sub(c.Now()); d < 59*24*time.Hour || d > 61*24*time.Hour {
		t.Errorf("the leaf is renewed %v from now, want at two thirds of 90 days", d)
	}
	assertNoKeyInLogs(t, s)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestEnsureIsIdempotent(t *testing.T) {
	k, c := newKeeper(t)
	ensure(t, k)
	before := read(t, k)
	c.Add(24 * time.Hour)
	ensure(t, k)
	ensure(t, k)
	after := read(t, k)
	for name, pair := range map[string][2]string{
		"CA Secret":        {before.ca.ResourceVersion, after.ca.ResourceVersion},
		"leaf Secret":      {before.leaf.ResourceVersion, after.leaf.ResourceVersion},
		"public Secret":    {before.public.ResourceVersion, after.public.ResourceVersion},
		"public ConfigMap": {before.cm.ResourceVersion, after.cm.ResourceVersion},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s was written again with nothing to change (resourceVersion %s -> %s)", name, pair[0], pair[1])
		}
	}
}

func TestLeafIsRenewedAtTwoThirdsFromTheSameCA(t *testing.T) {
	k, c := newKeeper(t)
	ensure(t, k)
	before := read(t, k)
	old := leafCert(t, before.leaf)

	c.Add(59 * 24 * time.Hour)
	ensure(t, k)
	if got := leafCert(t, read(t, k).leaf); got.SerialNumber.Cmp(old.SerialNumber) != 0 {
		t.Fatal("the leaf was renewed before two thirds of its life")
	}

	c.Add(2 * 24 * time.Hour)
	ensure(t, k)
	after := read(t, k)
	renewed := leafCert(t, after.leaf)
	if renewed.SerialNumber.Cmp(old.SerialNumber) == 0 {
		t.Fatal("the leaf was not renewed past two thirds of its life")
	}
	if bytes.Equal(after.leaf.Data[corev1.TLSPrivateKeyKey], before.leaf.Data[corev1.TLSPrivateKeyKey]) {
		t.Error("the renewed leaf kept its key")
	}
	if !bytes.Equal(before.ca.Data[CACertKey], after.ca.Data[CACertKey]) || before.cm.ResourceVersion != after.cm.ResourceVersion {
		t.Error("renewing the leaf changed the CA or the published CA")
	}
	verifies(t, k, renewed, []byte(after.cm.Data[CACertKey]))
}

func TestBrokenOrForeignLeafIsIssuedAgain(t *testing.T) {
	k, _ := newKeeper(t)
	ctx := context.Background()
	ensure(t, k)
	s := read(t, k)

	// A leaf signed by another CA, for other names.
	other, err := newAuthority(k.Now())
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := issueLeaf(other, []string{"evil.example"}, k.Now(), LeafLifetime)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]map[string][]byte{
		"a leaf of another CA":    {corev1.TLSCertKey: foreign.certPEM, corev1.TLSPrivateKeyKey: foreign.keyPEM},
		"a key of another leaf":   {corev1.TLSCertKey: s.leaf.Data[corev1.TLSCertKey], corev1.TLSPrivateKeyKey: foreign.keyPEM},
		"garbage":                 {corev1.TLSCertKey: []byte("nope"), corev1.TLSPrivateKeyKey: []byte("nope")},
		"our CA, the wrong names": nil,
	} {
		if data == nil {
			l, err := issueLeaf(parseAuthority(s.ca.Data[CACertKey], s.ca.Data[CAKeyKey]), []string{"ichor-ui"}, k.Now(), LeafLifetime)
			if err != nil {
				t.Fatal(err)
			}
			data = map[string][]byte{corev1.TLSCertKey: l.certPEM, corev1.TLSPrivateKeyKey: l.keyPEM}
		}
		cur := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(s.leaf), cur); err != nil {
			t.Fatal(err)
		}
		cur.Data = data
		if err := k8s.Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
		ensure(t, k)
		verifies(t, k, leafCert(t, read(t, k).leaf), s.public.Data[CACertKey])
		if t.Failed() {
			t.Fatalf("after %s", name)
		}
	}

	// Deleted objects come back.
	for _, obj := range []client.Object{s.leaf, s.public, s.cm} {
		if err := k8s.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	ensure(t, k)
	again := read(t, k)
	verifies(t, k, leafCert(t, again.leaf), []byte(again.cm.Data[CACertKey]))
	if !bytes.Equal(again.public.Data[CACertKey], s.public.Data[CACertKey]) {
		t.Error("the published CA changed though the CA did not")
	}
}

func TestWrongTypeOfLeafSecretIsAClearError(t *testing.T) {
	k, _ := newKeeper(t)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: DefaultLeafSecret},
		Data: map[string][]byte{"x": []byte("y")}}
	if err := k8s.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	_, err := k.Ensure(context.Background())
	if err == nil || !strings.Contains(err.Error(), "kubernetes.io/tls") || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("want an error naming the type and the fix, got %v", err)
	}
	// Nothing was written to the leaf Secret.
	got := &corev1.Secret{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sec), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Data) != 1 || string(got.Data["x"]) != "y" {
		t.Errorf("the foreign Secret was changed: %v", keys(got.Data))
	}
}

// A CA near its end is replaced: the new one is published beside the old one
// first, signs leaves only after CAOverlap, and the old one goes when it ends.
func TestCARotationKeepsEveryLiveLeafVerifiable(t *testing.T) {
	k, c := newKeeper(t)
	ensure(t, k)
	first := read(t, k)
	oldCA := parseAuthority(first.ca.Data[CACertKey], first.ca.Data[CAKeyKey])

	// Up to one year before its end the CA stays; the leaf is renewed from it.
	for c.Now().Before(oldCA.cert.NotAfter.Add(-CARenewBefore - 61*24*time.Hour)) {
		c.Add(61 * 24 * time.Hour)
		ensure(t, k)
	}
	s := read(t, k)
	if s.ca.ResourceVersion != first.ca.ResourceVersion || s.cm.ResourceVersion != first.cm.ResourceVersion {
		t.Fatal("the CA changed long before its end")
	}

	c.Add(62 * 24 * time.Hour) // now within CARenewBefore of the end
	next := ensure(t, k)
	s = read(t, k)
	newCA := parseAuthority(s.ca.Data[CACertKey], s.ca.Data[CAKeyKey])
	if newCA == nil || newCA.cert.SerialNumber.Cmp(oldCA.cert.SerialNumber) == 0 {
		t.Fatal("the CA was not replaced within a year of its end")
	}
	if !bytes.Equal(s.ca.Data[PreviousCACertKey], oldCA.certPEM) {
		t.Fatal("the old CA is not kept beside the new one")
	}
	published := []byte(s.cm.Data[CACertKey])
	if !bytes.Contains(published, oldCA.certPEM) || !bytes.Contains(published, newCA.certPEM) {
		t.Fatal("the published bundle does not hold both CAs")
	}
	if !bytes.Equal(s.leaf.Data[CACertKey], published) {
		t.Error("the leaf Secret's ca.crt is not the new bundle")
	}
	leaf := leafCert(t, s.leaf)
	verifies(t, k, leaf, oldCA.certPEM) // clients holding only the old CA still verify
	if next.After(renewAt(leaf)) {
		t.Errorf("next run %v is after the leaf's renewal %v", next, renewAt(leaf))
	}

	// Within CAOverlap a new leaf is still signed by the old CA.
	reissue := func() *x509.Certificate {
		t.Helper()
		if err := k8s.Delete(context.Background(), s.leaf); err != nil {
			t.Fatal(err)
		}
		ensure(t, k)
		s = read(t, k)
		return leafCert(t, s.leaf)
	}
	c.Add(CAOverlap / 2)
	if leaf = reissue(); leaf.CheckSignatureFrom(oldCA.cert) != nil {
		t.Fatal("a leaf was signed by the new CA before it was published for CAOverlap")
	}
	// After it, the leaf is renewed from the new CA.
	c.Time(renewAt(leaf).Add(time.Minute))
	ensure(t, k)
	s = read(t, k)
	if leaf = leafCert(t, s.leaf); leaf.CheckSignatureFrom(newCA.cert) != nil {
		t.Fatal("after CAOverlap the renewed leaf is not signed by the new CA")
	}
	verifies(t, k, leaf, newCA.certPEM)

	// Once the old CA has ended it is dropped from the Secret and the bundle.
	for !c.Now().After(oldCA.cert.NotAfter) {
		c.Add(30 * 24 * time.Hour)
		ensure(t, k)
	}
	s = read(t, k)
	if len(s.ca.Data[PreviousCACertKey]) != 0 || len(s.ca.Data[PreviousCAKeyKey]) != 0 {
		t.Error("the ended CA is still kept")
	}
	if s.cm.Data[CACertKey] != string(newCA.certPEM) || !bytes.Equal(s.public.Data[CACertKey], newCA.certPEM) {
		t.Error("the published bundle still holds the ended CA")
	}
	verifies(t, k, leafCert(t, s.leaf), newCA.certPEM)
	assertNoKeyInLogs(t, s)
}

func (c *clock) Time(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// The keeper runs in a manager, repairs a deleted leaf at its next check,
// and a real TLS client that trusts the published CA connects by a Service name.
func TestKeeperInManagerServesAVerifiableLeaf(t *testing.T) {
	k, _ := newKeeper(t)
	k.Now = nil // the real clock
	k.Resync = time.Second
	mgr, err := suite.NewManager()
	if err != nil {
		t.Fatal(err)
	}
	k.Client, k.Reader = nil, nil
	if err := k.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := testenv.StartManager(ctx, mgr); err != nil {
		t.Fatal(err)
	}
	leaf := &corev1.Secret{}
	testenv.Eventually(t, 0, "the leaf Secret", func() error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: DefaultLeafSecret}, leaf)
	})
	if err := k8s.Delete(ctx, leaf); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 0, "a new leaf Secret after the deletion", func() error {
		fresh := &corev1.Secret{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(leaf), fresh); err != nil {
			return err
		}
		if fresh.UID == leaf.UID {
			return fmt.Errorf("the deleted Secret is still there")
		}
		leaf = fresh
		return nil
	})
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: DefaultPublicName}, cm); err != nil {
		t.Fatal(err)
	}

	// A real handshake by the Service's cluster-local name.
	pair, err := tls.X509KeyPair(leaf.Data[corev1.TLSCertKey], leaf.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	name := "ichor-ui." + k.Namespace + ".svc.cluster.local"
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool(t, []byte(cm.Data[CACertKey])), ServerName: name, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, ln.Addr().String())
		},
	}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+name+"/", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("a client trusting ichor-ui-ca cannot reach %s: %v", name, err)
	}
	_ = resp.Body.Close()
	assertNoKeyInLogs(t, read(t, k))
}

// assertNoKeyInLogs checks that no private key of s, and no PEM key at all,
// reached the logs.
func assertNoKeyInLogs(t *testing.T, s state) {
	t.Helper()
	out := logs.String()
	if strings.Contains(out, "PRIVATE KEY") {
		t.Fatal("a PEM private key reached the logs")
	}
	for _, k := range [][]byte{s.ca.Data[CAKeyKey], s.ca.Data[PreviousCAKeyKey], s.leaf.Data[corev1.TLSPrivateKeyKey]} {
		lines := strings.Split(strings.TrimSpace(string(k)), "\n")
		for _, l := range lines {
			if len(l) > 20 && !strings.HasPrefix(l, "-----") && strings.Contains(out, l) {
				t.Fatal("key material reached the logs")
			}
		}
	}
	if !strings.Contains(out, "issued ichor-ui's serving certificate") {
		t.Error("the keeper logs nothing of what it issued")
	}
}

// TestLeafNamesTheRecordedUIURLHost: the host of the ichor-ui URL the
// IchorInstallation records is a name of the leaf (an IP address as an IP
// SAN), so `ichor auth token` and a browser verify ichor-ui there with the
// published CA; a changed URL re-issues the leaf, and without a URL the leaf
// names the Service only.
func TestLeafNamesTheRecordedUIURLHost(t *testing.T) {
	ctx := context.Background()
	k, _ := newKeeper(t)
	ii := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName, Annotations: map[string]string{install.UIURLAnnotation: "https://127.0.0.1:8443"}},
		Spec:       ichorv1alpha1.IchorInstallationSpec{Version: ichorv1alpha1.IchorVersionSpec{Version: "v0.1.0"}},
	}
	if err := k8s.Create(ctx, ii); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ii) })

	service := k.DNSNames()
	for _, tc := range []struct {
		url, host string
	}{
		{"https://127.0.0.1:8443", "127.0.0.1"},
		{"https://Ichor.Example.com", "ichor.example.com"},
		{"", ""},
	} {
		ii.Annotations[install.UIURLAnnotation] = tc.url
		if err := k8s.Update(ctx, ii); err != nil {
			t.Fatal(err)
		}
		ensure(t, k)
		s := read(t, k)
		leaf := leafCert(t, s.leaf)
		want := service
		if tc.host != "" {
			want = append(slices.Clone(service), tc.host)
		}
		if !sameNames(leaf, want) {
			t.Fatalf("URL %q: the leaf is for %v %v, want %v", tc.url, leaf.DNSNames, leaf.IPAddresses, want)
		}
		if tc.host != "" {
			if err := leaf.VerifyHostname(tc.host); err != nil {
				t.Fatalf("URL %q: %v", tc.url, err)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(t, []byte(s.cm.Data[CACertKey])), CurrentTime: k.Now(),
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				t.Fatalf("URL %q: the leaf does not verify against the published CA: %v", tc.url, err)
			}
		}
		verifies(t, k, leaf, []byte(s.cm.Data[CACertKey]))
	}
}

// TestIssuerPublished: with ichor-ui's URL recorded and its Service given a
// ClusterIP, the leaf names the ClusterIP too, and the IchorInstallation's
// status.issuer says where the kube-apiserver finds the issuer: the URL, the
// discovery document on the ClusterIP's port 8444, and the published CA
// bundle; without the URL it is taken away.
func TestIssuerPublished(t *testing.T) {
	ctx := context.Background()
	k, _ := newKeeper(t)
	ii := &ichorv1alpha1.IchorInstallation{
		ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName, Annotations: map[string]string{install.UIURLAnnotation: "https://ichor.example.com/"}},
		Spec:       ichorv1alpha1.IchorInstallationSpec{Version: ichorv1alpha1.IchorVersionSpec{Version: "v0.1.0"}},
	}
	if err := k8s.Create(ctx, ii); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ii) })

	// Before ichor-ui's Service exists: nothing published, and the keeper
	// looks again soon rather than at its resync.
	if next := ensure(t, k); next.After(k.Now().Add(ServiceWait)) {
		t.Fatalf("without ichor-ui's Service the keeper runs again at %v, more than %v from now", next, ServiceWait)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Name: ii.Name}, ii); err != nil || ii.Status.Issuer != nil {
		t.Fatalf("an issuer published without ichor-ui's Service: %+v, %v", ii.Status.Issuer, err)
	}

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: DefaultServiceName},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "oidc", Port: 8444}}},
	}
	if err := k8s.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	ip := svc.Spec.ClusterIP

	ensure(t, k)
	s := read(t, k)
	leaf := leafCert(t, s.leaf)
	if !sameNames(leaf, append(k.DNSNames(), ip, "ichor.example.com")) || leaf.VerifyHostname(ip) != nil {
		t.Fatalf("the leaf is for %v %v, want the Service's names, its ClusterIP %s and the URL's host", leaf.DNSNames, leaf.IPAddresses, ip)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Name: ii.Name}, ii); err != nil {
		t.Fatal(err)
	}
	want := &ichorv1alpha1.IssuerStatus{
		URL: "https://ichor.example.com", DiscoveryURL: "https://" + ip + ":8444/.well-known/openid-configuration", CertificateAuthority: s.cm.Data[CACertKey],
	}
	if got := ii.Status.Issuer; got == nil || *got != *want {
		t.Fatalf("status.issuer %+v, want %+v", got, want)
	}

	delete(ii.Annotations, install.UIURLAnnotation)
	if err := k8s.Update(ctx, ii); err != nil {
		t.Fatal(err)
	}
	ensure(t, k)
	if err := k8s.Get(ctx, client.ObjectKey{Name: ii.Name}, ii); err != nil {
		t.Fatal(err)
	}
	if ii.Status.Issuer != nil {
		t.Fatalf("status.issuer %+v after the URL went", ii.Status.Issuer)
	}
}

// TestSigningKeyIsMadeOnceAndRepaired: the keeper makes ichor-ui's shared
// signing key (a P-256 key ichor-ui reads), leaves a good one alone, and
// replaces one that cannot be read.
func TestSigningKeyIsMadeOnceAndRepaired(t *testing.T) {
	k, _ := newKeeper(t)
	ctx := context.Background()
	ensure(t, k)
	key := client.ObjectKey{Namespace: k.Namespace, Name: DefaultSigningKeySecret}
	first := &corev1.Secret{}
	if err := k8s.Get(ctx, key, first); err != nil {
		t.Fatalf("no signing key Secret after Ensure: %v", err)
	}
	block, _ := pem.Decode(first.Data[SigningKeyKey])
	if block == nil {
		t.Fatalf("the signing key is not PEM: keys %v", keys(first.Data))
	}
	sk, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil || sk.Curve.Params().Name != "P-256" {
		t.Fatalf("the signing key is not an ECDSA P-256 key: %v", err)
	}
	if first.Type != corev1.SecretTypeOpaque {
		t.Errorf("the signing key Secret is of type %s", first.Type)
	}

	ensure(t, k)
	again := &corev1.Secret{}
	if err := k8s.Get(ctx, key, again); err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != first.ResourceVersion || !bytes.Equal(again.Data[SigningKeyKey], first.Data[SigningKeyKey]) {
		t.Fatal("a good signing key was replaced: every replica's tokens would stop verifying")
	}

	again.Data[SigningKeyKey] = []byte("not a key")
	if err := k8s.Update(ctx, again); err != nil {
		t.Fatal(err)
	}
	ensure(t, k)
	repaired := &corev1.Secret{}
	if err := k8s.Get(ctx, key, repaired); err != nil {
		t.Fatal(err)
	}
	if !validSigningKey(repaired.Data[SigningKeyKey]) || bytes.Equal(repaired.Data[SigningKeyKey], first.Data[SigningKeyKey]) {
		t.Fatal("an unreadable signing key was not replaced by a new one")
	}
}
