// Package servingca keeps the Ichor serving CA (architecture, "Trust" and
// "Deployment"): a long-lived ECDSA P-256 CA in a Secret only the controller
// reads, a leaf for ichor-ui's Service names in the kubernetes.io/tls Secret
// ichor-ui mounts (beside the issuer's signing key, signingkey.go), renewed at two thirds of its 90-day life, and the CA's
// public part published as the ConfigMap and the Secret ichor-ui-ca, for an
// edge or a client (--ca-file) that verifies ichor-ui, and for the
// kube-apiserver that fetches the OIDC keys from ichor-ui's port 8444.
//
// The Keeper is a manager Runnable on the leader. It reads its objects
// uncached (the controller watches no Secret) and runs again at the next
// renewal time, or after Resync to repair an object someone deleted, never
// in a loop. When the CA nears its end a new one is made and published beside
// the old one, and signs leaves only once it has been published for
// CAOverlap, so clients holding the bundle never see a leaf they cannot
// verify. No key is ever logged or written anywhere but the two Secrets.
package servingca

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// The keeper reads and writes its Secrets and publishes the ConfigMap, in Ichor's namespace only.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update,namespace=ichor-system
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update,namespace=ichor-system
// The leaf also names the host of ichor-ui's URL the IchorInstallation records
// and the Service's ClusterIP; the issuer is published in the installation's status.
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=ichorinstallations,verbs=get
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=ichorinstallations/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get,namespace=ichor-system

// Default object names.
const (
	// DefaultCASecret holds the CA and its key; only the controller reads it.
	DefaultCASecret = "ichor-serving-ca" //nolint:gosec // a Secret's name, not a credential
	// DefaultLeafSecret is the kubernetes.io/tls Secret ichor-ui mounts.
	DefaultLeafSecret = "ichor-ui-tls" //nolint:gosec // a Secret's name, not a credential
	// DefaultPublicName names the ConfigMap and the Secret holding ca.crt only.
	DefaultPublicName = "ichor-ui-ca"
	// DefaultServiceName is ichor-ui's Service.
	DefaultServiceName = "ichor-ui"
	// DefaultClusterDomain is the cluster's DNS domain.
	DefaultClusterDomain = "cluster.local"
	// DefaultResync bounds the time between two checks of the objects.
	DefaultResync = 10 * time.Minute
)

// Secret and ConfigMap keys.
const (
	// CACertKey holds PEM CA certificates: in the CA Secret the current CA,
	// in the leaf Secret and the published objects the bundle of every CA
	// that may have signed a live leaf.
	CACertKey = "ca.crt"
	// CAKeyKey holds the current CA's PEM key (CA Secret only).
	CAKeyKey = "ca.key"
	// PreviousCACertKey and PreviousCAKeyKey hold the CA being replaced,
	// until it expires.
	PreviousCACertKey = "previous-ca.crt"
	PreviousCAKeyKey  = "previous-ca.key"
)

// Lifetimes.
const (
	// CALifetime is the life of a serving CA.
	CALifetime = 10 * 365 * 24 * time.Hour
	// CARenewBefore is how long before its end a CA is replaced.
	CARenewBefore = 365 * 24 * time.Hour
	// CAOverlap is how long a new CA is published before it signs a leaf.
	CAOverlap = 30 * 24 * time.Hour
	// LeafLifetime is the life of ichor-ui's serving certificate; it is
	// renewed at two thirds of it.
	LeafLifetime = 90 * 24 * time.Hour
	// backdate absorbs clock skew between the controller and the clients.
	backdate = time.Hour
)

// partOf is the label value and the certificates' organization.
const partOf = "ichor"

// Keeper keeps the serving CA, ichor-ui's leaf and the published CA.
type Keeper struct {
	// Client writes the objects.
	Client client.Client
	// Reader reads them, uncached (mgr.GetAPIReader()).
	Reader client.Reader
	// Namespace is Ichor's namespace.
	Namespace string
	// CASecret, LeafSecret and PublicName name the objects; empty means the defaults.
	CASecret, LeafSecret, PublicName string
	// ServiceName and ClusterDomain make the leaf's names; empty means the defaults.
	ServiceName, ClusterDomain string
	// Resync bounds the wait between two runs; zero means DefaultResync.
	Resync time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives what was issued (names, serials, dates; never a key);
	// the zero value means ctrl.Log.
	Log logr.Logger
}

// errRetry means another writer changed an object under us: run again.
var errRetry = errors.New("an object changed while it was written")

func (k *Keeper) defaults() {
	if k.CASecret == "" {
		k.CASecret = DefaultCASecret
	}
	if k.LeafSecret == "" {
		k.LeafSecret = DefaultLeafSecret
	}
	if k.PublicName == "" {
		k.PublicName = DefaultPublicName
	}
	if k.ServiceName == "" {
		k.ServiceName = DefaultServiceName
	}
	if k.ClusterDomain == "" {
		k.ClusterDomain = DefaultClusterDomain
	}
	if k.Resync == 0 {
		k.Resync = DefaultResync
	}
	if k.Now == nil {
		k.Now = time.Now
	}
	if k.Log.GetSink() == nil {
		k.Log = ctrl.Log.WithName("serving-ca")
	}
}

// SetupWithManager adds the keeper to the manager.
func (k *Keeper) SetupWithManager(mgr ctrl.Manager) error {
	if k.Client == nil {
		k.Client = mgr.GetClient()
	}
	if k.Reader == nil {
		k.Reader = mgr.GetAPIReader()
	}
	if k.Namespace == "" {
		return errors.New("servingca: Namespace is required")
	}
	return mgr.Add(k)
}

// NeedLeaderElection makes the keeper run on the leader only.
func (k *Keeper) NeedLeaderElection() bool { return true }

// Start runs Ensure now and again at the renewal time (at most Resync
// later), backing off on errors, until ctx ends.
func (k *Keeper) Start(ctx context.Context) error {
	k.defaults()
	const minBackoff, maxBackoff = 5 * time.Second, 5 * time.Minute
	backoff := minBackoff
	for {
		next, err := k.Ensure(ctx)
		var wait time.Duration
		if err != nil {
			k.Log.Error(err, "keeping ichor-ui's serving certificate; trying again", "in", backoff.String())
			wait = backoff
			backoff = min(2*backoff, maxBackoff)
		} else {
			backoff = minBackoff
			wait = min(max(next.Sub(k.Now()), time.Second), k.Resync)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// DNSNames are the names ichor-ui's Service is reached by: the leaf's names.
func (k *Keeper) DNSNames() []string {
	k.defaults()
	svc, ns := k.ServiceName, k.Namespace
	return []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc." + k.ClusterDomain}
}

// uiAddress is where ichor-ui is reached besides its Service names: the
// URL the IchorInstallation records (`ichor init --ui-url`; "" when none)
// and the Service's ClusterIP ("" when it has none yet).
type uiAddress struct {
	url, host, clusterIP string
}

func (k *Keeper) uiAddress(ctx context.Context) (uiAddress, error) {
	var a uiAddress
	ii := &ichorv1alpha1.IchorInstallation{}
	err := k.Reader.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return a, fmt.Errorf("reading the IchorInstallation (its ichor-ui URL is a name of the leaf): %w", err)
	default:
		if raw := ii.Annotations[install.UIURLAnnotation]; raw != "" && install.CheckUIURL(raw) == nil {
			if u, err := url.Parse(raw); err == nil {
				a.url, a.host = strings.TrimSuffix(raw, "/"), strings.ToLower(u.Hostname())
			}
		}
	}
	svc := &corev1.Service{}
	err = k.Reader.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.ServiceName}, svc)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return a, fmt.Errorf("reading Service %s/%s (its ClusterIP is a name of the leaf): %w", k.Namespace, k.ServiceName, err)
	default:
		if ip := net.ParseIP(svc.Spec.ClusterIP); ip != nil {
			a.clusterIP = ip.String()
		}
	}
	return a, nil
}

// leafNames are the leaf's names: the Service's (DNSNames) and its
// ClusterIP, which the kube-apiserver dials for the issuer's keys on 8444,
// and the host of the URL browsers and the CLI reach ichor-ui at (an IP
// address as an IP SAN), so that `ichor auth token` and a browser can verify
// ichor-ui there with the published CA.
func (k *Keeper) leafNames(a uiAddress) []string {
	names := k.DNSNames()
	for _, n := range []string{a.clusterIP, a.host} {
		if n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// ServiceWait is how soon the keeper looks again for ichor-ui's Service
// while Ichor's users are on and the Service has no ClusterIP yet.
const ServiceWait = 10 * time.Second

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// IssuerDiscoveryPort is ichor-ui's listener of the issuer's discovery
// document and keys for the kube-apiserver.
const IssuerDiscoveryPort = "8444"

// publishIssuer records in the IchorInstallation's status where the
// kube-apiserver finds ichor-ui's issuer (render.LoadInput reads it for
// spec.authentication.ichorUsers): its URL, the discovery document on the
// Service's ClusterIP, and the CA bundle; nothing while either is unknown.
func (k *Keeper) publishIssuer(ctx context.Context, a uiAddress, caBundle []byte) error {
	ii := &ichorv1alpha1.IchorInstallation{}
	if err := k.Reader.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii); err != nil {
		return client.IgnoreNotFound(err)
	}
	var want *ichorv1alpha1.IssuerStatus
	if a.url != "" && a.clusterIP != "" {
		want = &ichorv1alpha1.IssuerStatus{
			URL:                  a.url,
			DiscoveryURL:         "https://" + net.JoinHostPort(a.clusterIP, IssuerDiscoveryPort) + "/.well-known/openid-configuration",
			CertificateAuthority: string(caBundle),
		}
	}
	if reflect.DeepEqual(ii.Status.Issuer, want) {
		return nil
	}
	patch := client.MergeFromWithOptions(ii.DeepCopy(), client.MergeFromWithOptimisticLock{})
	ii.Status.Issuer = want
	if err := k.Client.Status().Patch(ctx, ii, patch); err != nil {
		if apierrors.IsConflict(err) {
			return errRetry
		}
		return fmt.Errorf("publishing ichor-ui's issuer in the IchorInstallation's status: %w", err)
	}
	if want != nil {
		k.Log.Info("published ichor-ui's issuer for the kube-apiserver", "issuer", want.URL, "discovery", want.DiscoveryURL)
	}
	return nil
}

// Ensure brings the CA Secret, the leaf Secret and the published CA to the
// wanted state, writing only what differs, and returns when it must run
// again (the leaf's or the CA's renewal time, or the previous CA's end).
func (k *Keeper) Ensure(ctx context.Context) (time.Time, error) {
	k.defaults()
	var err error
	for range 5 {
		var next time.Time
		next, err = k.ensureOnce(ctx)
		if !errors.Is(err, errRetry) {
			return next, err
		}
	}
	return time.Time{}, fmt.Errorf("the serving certificate objects in %s keep changing under the controller; is another controller writing them? %w", k.Namespace, err)
}

func (k *Keeper) ensureOnce(ctx context.Context) (time.Time, error) {
	now := k.Now()
	cur, prev, err := k.ensureCA(ctx, now)
	if err != nil {
		return time.Time{}, err
	}
	caBundle := bundle(cur, prev)
	addr, err := k.uiAddress(ctx)
	if err != nil {
		return time.Time{}, err
	}
	renewAt, err := k.ensureLeaf(ctx, now, cur, prev, caBundle, addr)
	if err != nil {
		return time.Time{}, err
	}
	if err := k.publish(ctx, caBundle); err != nil {
		return time.Time{}, err
	}
	if err := k.publishIssuer(ctx, addr, caBundle); err != nil {
		return time.Time{}, err
	}
	if err := k.ensureSigningKey(ctx); err != nil {
		return time.Time{}, err
	}
	next := now.Add(k.Resync)
	for _, t := range []time.Time{renewAt, cur.cert.NotAfter.Add(-CARenewBefore)} {
		if t.Before(next) {
			next = t
		}
	}
	if addr.url != "" && addr.clusterIP == "" {
		// Ichor's users are on and ichor-ui's Service is not there yet (the
		// installer applies it beside the controller): its ClusterIP is a
		// name of the leaf and the issuer's address, so look again soon.
		next = minTime(next, now.Add(ServiceWait))
	}
	if prev != nil && prev.cert.NotAfter.Before(next) {
		next = prev.cert.NotAfter
	}
	return next, nil
}

func (k *Keeper) labels(component string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/part-of":    partOf,
		"app.kubernetes.io/managed-by": "ichor-controller",
		"app.kubernetes.io/component":  component,
	}
}

// ensureCA returns the current CA and the one it replaces (or nil), making,
// rotating or repairing them in the CA Secret.
func (k *Keeper) ensureCA(ctx context.Context, now time.Time) (cur, prev *authority, err error) {
	key := client.ObjectKey{Namespace: k.Namespace, Name: k.CASecret}
	secret := &corev1.Secret{}
	if err := k.Reader.Get(ctx, key, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		ca, err := newAuthority(now)
		if err != nil {
			return nil, nil, err
		}
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.CASecret, Labels: k.labels("serving-ca")},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{CACertKey: ca.certPEM, CAKeyKey: ca.keyPEM},
		}
		if err := k.Client.Create(ctx, secret); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return nil, nil, errRetry
			}
			return nil, nil, fmt.Errorf("creating Secret %s: %w", key, err)
		}
		k.Log.Info("made the Ichor serving CA", "secret", key.String(), "serial", ca.cert.SerialNumber.String(),
			"notAfter", ca.cert.NotAfter.UTC().Format(time.RFC3339))
		return ca, nil, nil
	}

	cur = parseAuthority(secret.Data[CACertKey], secret.Data[CAKeyKey])
	prev = parseAuthority(secret.Data[PreviousCACertKey], secret.Data[PreviousCAKeyKey])
	changed := false
	if prev != nil && !now.Before(prev.cert.NotAfter) {
		prev = nil // expired: no live leaf can be signed by it
	}
	if prev == nil && (len(secret.Data[PreviousCACertKey]) > 0 || len(secret.Data[PreviousCAKeyKey]) > 0) {
		changed = true
	}
	switch {
	case cur == nil:
		k.Log.Info("the serving CA Secret holds no usable CA; making a new one (ichor-ui's leaf is issued again)", "secret", key.String())
		if cur, err = newAuthority(now); err != nil {
			return nil, nil, err
		}
		prev, changed = nil, true
	case !now.Before(cur.cert.NotAfter.Add(-CARenewBefore)):
		next, err := newAuthority(now)
		if err != nil {
			return nil, nil, err
		}
		k.Log.Info("replacing the Ichor serving CA before it expires; both are published until the old one ends",
			"secret", key.String(), "oldSerial", cur.cert.SerialNumber.String(), "oldNotAfter", cur.cert.NotAfter.UTC().Format(time.RFC3339),
			"serial", next.cert.SerialNumber.String(), "notAfter", next.cert.NotAfter.UTC().Format(time.RFC3339))
		cur, prev, changed = next, cur, true
	}
	if !changed {
		return cur, prev, nil
	}
	data := map[string][]byte{CACertKey: cur.certPEM, CAKeyKey: cur.keyPEM}
	if prev != nil {
		data[PreviousCACertKey], data[PreviousCAKeyKey] = prev.certPEM, prev.keyPEM
	}
	secret.Data = data
	if err := k.Client.Update(ctx, secret); err != nil {
		if apierrors.IsConflict(err) {
			return nil, nil, errRetry
		}
		return nil, nil, fmt.Errorf("updating Secret %s: %w", key, err)
	}
	return cur, prev, nil
}

// signer is the CA that signs a new leaf: the current one once it has been
// published for CAOverlap, the previous one before (while it outlives a leaf).
func signer(cur, prev *authority, now time.Time) *authority {
	if prev != nil && now.Before(cur.cert.NotBefore.Add(backdate+CAOverlap)) && prev.cert.NotAfter.After(now.Add(LeafLifetime)) {
		return prev
	}
	return cur
}

// renewAt is when a leaf is renewed: at two thirds of its life.
func renewAt(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

// ensureLeaf keeps ichor-ui's leaf and returns its renewal time.
func (k *Keeper) ensureLeaf(ctx context.Context, now time.Time, cur, prev *authority, caBundle []byte, addr uiAddress) (time.Time, error) {
	key := client.ObjectKey{Namespace: k.Namespace, Name: k.LeafSecret}
	names := k.leafNames(addr)
	secret := &corev1.Secret{}
	create := false
	reason := ""
	if err := k.Reader.Get(ctx, key, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return time.Time{}, fmt.Errorf("reading Secret %s: %w", key, err)
		}
		create, reason = true, "missing"
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.LeafSecret, Labels: k.labels("ichor-ui-serving-certificate")},
			Type:       corev1.SecretTypeTLS,
		}
	} else if secret.Type != corev1.SecretTypeTLS {
		return time.Time{}, fmt.Errorf("secret %s is of type %s, not %s, so it is not the one Ichor keeps for ichor-ui; delete it and the controller makes it again",
			key, secret.Type, corev1.SecretTypeTLS)
	}
	if reason == "" {
		cert, err := parseLeaf(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
		switch {
		case err != nil:
			reason = "unreadable: " + err.Error()
		case !sameNames(cert, names):
			reason = "its names are not the Service's and ichor-ui's URL's"
		case !signedBy(cert, cur, prev):
			reason = "not signed by the serving CA"
		case now.Before(cert.NotBefore):
			reason = "not yet valid"
		case !now.Before(renewAt(cert)):
			reason = "due for renewal"
		default:
			if bytes.Equal(secret.Data[CACertKey], caBundle) {
				return renewAt(cert), nil
			}
			// Only the bundle changed (a CA was added or dropped).
			secret.Data[CACertKey] = caBundle
			if err := k.Client.Update(ctx, secret); err != nil {
				if apierrors.IsConflict(err) {
					return time.Time{}, errRetry
				}
				return time.Time{}, fmt.Errorf("updating Secret %s: %w", key, err)
			}
			return renewAt(cert), nil
		}
	}

	ca := signer(cur, prev, now)
	l, err := issueLeaf(ca, names, now, LeafLifetime)
	if err != nil {
		return time.Time{}, err
	}
	secret.Data = map[string][]byte{corev1.TLSCertKey: l.certPEM, corev1.TLSPrivateKeyKey: l.keyPEM, CACertKey: caBundle}
	if create {
		err = k.Client.Create(ctx, secret)
	} else {
		err = k.Client.Update(ctx, secret)
	}
	if err != nil {
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			return time.Time{}, errRetry
		}
		return time.Time{}, fmt.Errorf("writing Secret %s: %w", key, err)
	}
	k.Log.Info("issued ichor-ui's serving certificate", "secret", key.String(), "reason", reason, "names", names,
		"serial", l.cert.SerialNumber.String(), "notAfter", l.cert.NotAfter.UTC().Format(time.RFC3339),
		"renewAt", renewAt(l.cert).UTC().Format(time.RFC3339), "caSerial", ca.cert.SerialNumber.String())
	return renewAt(l.cert), nil
}

func signedBy(cert *x509.Certificate, cas ...*authority) bool {
	for _, ca := range cas {
		if ca != nil && cert.CheckSignatureFrom(ca.cert) == nil && !cert.NotAfter.After(ca.cert.NotAfter) {
			return true
		}
	}
	return false
}

// publish writes the CA bundle, public part only, as the ConfigMap and the
// Secret PublicName.
func (k *Keeper) publish(ctx context.Context, caBundle []byte) error {
	key := client.ObjectKey{Namespace: k.Namespace, Name: k.PublicName}
	cm := &corev1.ConfigMap{}
	if err := k.Reader.Get(ctx, key, cm); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading ConfigMap %s: %w", key, err)
		}
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.PublicName, Labels: k.labels("serving-ca-public")},
			Data:       map[string]string{CACertKey: string(caBundle)},
		}
		if err := k.Client.Create(ctx, cm); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return errRetry
			}
			return fmt.Errorf("creating ConfigMap %s: %w", key, err)
		}
	} else if len(cm.Data) != 1 || cm.Data[CACertKey] != string(caBundle) || len(cm.BinaryData) != 0 {
		cm.Data, cm.BinaryData = map[string]string{CACertKey: string(caBundle)}, nil
		if err := k.Client.Update(ctx, cm); err != nil {
			if apierrors.IsConflict(err) {
				return errRetry
			}
			return fmt.Errorf("updating ConfigMap %s: %w", key, err)
		}
	}

	secret := &corev1.Secret{}
	if err := k.Reader.Get(ctx, key, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading Secret %s: %w", key, err)
		}
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.PublicName, Labels: k.labels("serving-ca-public")},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{CACertKey: caBundle},
		}
		if err := k.Client.Create(ctx, secret); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return errRetry
			}
			return fmt.Errorf("creating Secret %s: %w", key, err)
		}
		return nil
	}
	if len(secret.Data) == 1 && bytes.Equal(secret.Data[CACertKey], caBundle) {
		return nil
	}
	// Exactly ca.crt: anything else someone put there goes.
	secret.Data = map[string][]byte{CACertKey: caBundle}
	if err := k.Client.Update(ctx, secret); err != nil {
		if apierrors.IsConflict(err) {
			return errRetry
		}
		return fmt.Errorf("updating Secret %s: %w", key, err)
	}
	return nil
}
