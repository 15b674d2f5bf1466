package credentialrequest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	stdx509 "crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/download"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func createRequest(t *testing.T, name, cluster, purpose, publicKey string, d time.Duration) {
	t.Helper()

	tcr := &ichorv1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       ichorv1alpha1.TalosCredentialRequestSpec{ClusterName: cluster, Purpose: purpose, PublicKey: publicKey},
	}
	if d > 0 {
		tcr.Spec.Duration = &metav1.Duration{Duration: d}
	}

	if purpose == ichorv1alpha1.PurposeRotationCredentials {
		tcr.Spec.OperationName = "rotate-1"
	}

	if err := k8s.Create(context.Background(), tcr); err != nil {
		t.Fatal(err)
	}
}

// waitAnswered waits for Issued or Denied and returns the request.
func waitAnswered(t *testing.T, name string) *ichorv1alpha1.TalosCredentialRequest {
	t.Helper()

	tcr := &ichorv1alpha1.TalosCredentialRequest{}

	testenv.Eventually(t, waitTimeout, "request "+name+" answered", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, tcr); err != nil {
			return err
		}

		if apimeta.IsStatusConditionTrue(tcr.Status.Conditions, ichorv1alpha1.IssuedCondition) ||
			apimeta.IsStatusConditionTrue(tcr.Status.Conditions, ichorv1alpha1.DeniedCondition) {
			return nil
		}

		return errors.New("not answered yet")
	})

	return tcr
}

func issuedCert(t *testing.T, tcr *ichorv1alpha1.TalosCredentialRequest) *stdx509.Certificate {
	t.Helper()

	if !apimeta.IsStatusConditionTrue(tcr.Status.Conditions, ichorv1alpha1.IssuedCondition) {
		t.Fatalf("request %s not issued: %+v", tcr.Name, tcr.Status.Conditions)
	}

	block, _ := pem.Decode([]byte(tcr.Status.Certificate))
	if block == nil {
		t.Fatalf("status.certificate is not PEM")
	}

	cert, err := stdx509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	return cert
}

// dial connects to the emulated node with the issued certificate and the
// private key, verifying the node against status.ca, as ichor-ui does.
func dial(t *testing.T, tcr *ichorv1alpha1.TalosCredentialRequest, key *ecdsa.PrivateKey) *talosclient.Client {
	t.Helper()

	der, err := stdx509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}

	pair, err := tls.X509KeyPair([]byte(tcr.Status.Certificate), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}

	roots := stdx509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(tcr.Status.CA)) {
		t.Fatal("status.ca does not parse")
	}

	c, err := talosclient.New(context.Background(), talosclient.WithEndpoints(node.Address()),
		talosclient.WithTLSConfig(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS13}))
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() { _ = c.Close() })

	return c
}

func TestReaderIsIssuedAndAcceptedByTheNodeForReadsOnly(t *testing.T) {
	key, pub := newKey(t)
	createRequest(t, "reader-1", clusterName, ichorv1alpha1.PurposeReader, pub, 0)
	start := time.Now()
	tcr := waitAnswered(t, "reader-1")
	cert := issuedCert(t, tcr)

	if tcr.Status.Role != "os:reader" || !slices.Equal(cert.Subject.Organization, []string{"os:reader"}) {
		t.Fatalf("role %q, organization %v; want os:reader", tcr.Status.Role, cert.Subject.Organization)
	}

	if !slices.Equal(cert.ExtKeyUsage, []stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}) {
		t.Errorf("ExtKeyUsage %v, want exactly ClientAuth", cert.ExtKeyUsage)
	}

	if !cert.PublicKey.(*ecdsa.PublicKey).Equal(&key.PublicKey) {
		t.Error("the certificate is not for the request's public key")
	}

	if tcr.Status.CA != string(theBun.Certs.OS.Crt) {
		t.Error("status.ca is not the cluster's Talos API CA")
	}

	life := tcr.Status.ExpiresAt.Sub(start)
	if life < 9*time.Minute || life > 11*time.Minute || !cert.NotAfter.Equal(tcr.Status.ExpiresAt.Time) {
		t.Errorf("expiresAt %s (%s from the request), certificate NotAfter %s; want ten minutes", tcr.Status.ExpiresAt, life, cert.NotAfter)
	}

	// No secret in the request: neither a private key nor the CA key.
	all := fmt.Sprintf("%+v", tcr)
	if strings.Contains(all, "PRIVATE KEY") || strings.Contains(all, string(theBun.Certs.OS.Key)) {
		t.Fatal("the request holds a private key")
	}

	// The emulated node accepts the certificate for reads...
	c := dial(t, tcr, key)
	ctx := context.Background()

	if _, err := c.Version(ctx); err != nil {
		t.Fatalf("Version with the reader certificate: %v", err)
	}

	if _, err := c.ServiceList(ctx); err != nil {
		t.Fatalf("ServiceList with the reader certificate: %v", err)
	}

	if disks, err := safe.StateListAll[*block.Disk](ctx, c.COSI); err != nil || disks.Len() == 0 {
		t.Fatalf("Disk list with the reader certificate: %v", err)
	}

	// ...and refuses writes and secrets.
	if err := c.Reboot(ctx); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Reboot with the reader certificate: %v, want PermissionDenied", err)
	}

	_, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: []byte("version: v1alpha1\n"), Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ApplyConfiguration with the reader certificate: %v, want PermissionDenied", err)
	}

	if _, err := safe.StateGetByID[*config.MachineConfig](ctx, c.COSI, config.ActiveID); err == nil || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Fatalf("MachineConfig with the reader certificate: %v, want PermissionDenied", err)
	}

	// The Event says what was signed, and holds nothing secret.
	testenv.Eventually(t, waitTimeout, "the Issued Event", func() error {
		list := &eventsv1.EventList{}
		if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}

		for _, e := range list.Items {
			if e.Regarding.Name != "reader-1" {
				continue
			}

			if strings.Contains(e.Note, "PRIVATE") || strings.Contains(e.Note, "BEGIN") {
				t.Fatalf("an Event holds key material: %q", e.Note)
			}

			if e.Reason == ichorv1alpha1.IssuedReason && strings.Contains(e.Note, "os:reader") {
				return nil
			}
		}

		return errors.New("no Issued Event yet")
	})
}

func TestEachPurposeGetsItsLeastRole(t *testing.T) {
	for _, tc := range []struct {
		purpose, role string
		life          time.Duration
	}{
		{ichorv1alpha1.PurposeTalosconfigReader, "os:reader", time.Hour},
		{ichorv1alpha1.PurposeSupportBundle, "os:operator", 10 * time.Minute},
		{ichorv1alpha1.PurposePacketCapture, "os:operator", 10 * time.Minute},
		{ichorv1alpha1.PurposeEtcdSnapshot, "os:etcd:backup", 10 * time.Minute},
	} {
		t.Run(tc.purpose, func(t *testing.T) {
			_, pub := newKey(t)
			createRequest(t, "role-"+tc.purpose, clusterName, tc.purpose, pub, 0)
			start := time.Now()
			tcr := waitAnswered(t, "role-"+tc.purpose)
			cert := issuedCert(t, tcr)

			if tcr.Status.Role != tc.role || !slices.Equal(cert.Subject.Organization, []string{tc.role}) {
				t.Fatalf("role %q, organization %v; want %s", tcr.Status.Role, cert.Subject.Organization, tc.role)
			}

			if life := cert.NotAfter.Sub(start); life < tc.life-time.Minute || life > tc.life+time.Minute {
				t.Fatalf("lifetime %s, want %s", life, tc.life)
			}
		})
	}
}

func TestEtcdBackupCertificateMayNotRead(t *testing.T) {
	key, pub := newKey(t)
	createRequest(t, "backup-1", clusterName, ichorv1alpha1.PurposeEtcdSnapshot, pub, 0)
	c := dial(t, waitAnswered(t, "backup-1"), key)

	// os:etcd:backup is not a reader (the rules table: Version is A,O,R).
	if _, err := c.Version(context.Background()); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Version with os:etcd:backup: %v, want PermissionDenied", err)
	}
}

func TestDurationIsCappedAndHonoured(t *testing.T) {
	_, pub := newKey(t)
	// No webhook runs here: the reconciler caps on its own.
	createRequest(t, "long", clusterName, ichorv1alpha1.PurposeReader, pub, 3*time.Hour)
	start := time.Now()
	cert := issuedCert(t, waitAnswered(t, "long"))

	if life := cert.NotAfter.Sub(start); life > 11*time.Minute {
		t.Fatalf("a reader certificate lasts %s, want at most ten minutes", life)
	}

	createRequest(t, "short", clusterName, ichorv1alpha1.PurposeReader, pub, 2*time.Minute)
	start = time.Now()
	cert = issuedCert(t, waitAnswered(t, "short"))

	if life := cert.NotAfter.Sub(start); life < time.Minute || life > 3*time.Minute {
		t.Fatalf("a two-minute request lasts %s", life)
	}
}

func TestCertificateRequestIsAccepted(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	der, err := stdx509.CreateCertificateRequest(rand.Reader, &stdx509.CertificateRequest{Subject: pkix.Name{CommonName: "ignored", Organization: []string{"os:admin"}}}, key)
	if err != nil {
		t.Fatal(err)
	}

	createRequest(t, "csr-1", clusterName, ichorv1alpha1.PurposeReader, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})), 0)
	tcr := waitAnswered(t, "csr-1")
	cert := issuedCert(t, tcr)

	// The CSR's subject asks for os:admin: ignored, the purpose decides.
	if !slices.Equal(cert.Subject.Organization, []string{"os:reader"}) {
		t.Fatalf("organization %v, want the purpose's os:reader", cert.Subject.Organization)
	}

	if _, err := dial(t, tcr, key).Version(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestDeniedWithAClearMessageAndNotRetried(t *testing.T) {
	_, pub := newKey(t)

	weak, err := rsa.GenerateKey(rand.Reader, 1024) //nolint:gosec // the weak key the controller must refuse
	if err != nil {
		t.Fatal(err)
	}

	weakDER, err := stdx509.MarshalPKIXPublicKey(&weak.PublicKey)
	if err != nil {
		t.Fatal(err)
	}

	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}

	privDER, err := stdx509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, cluster, purpose, key, reason, msg string
	}{
		{"unknown-cluster", "nope", ichorv1alpha1.PurposeReader, pub, ichorv1alpha1.UnknownClusterReason, `TalosCluster "nope" not found`},
		{"no-bundle", "orphan", ichorv1alpha1.PurposeReader, pub, ichorv1alpha1.BundleUnavailableReason, `"orphan-secrets" not found`},
		{"garbage-key", clusterName, ichorv1alpha1.PurposeReader, "hello", ichorv1alpha1.BadPublicKeyReason, "not PEM"},
		{"private-key", clusterName, ichorv1alpha1.PurposeReader, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: privDER})), ichorv1alpha1.BadPublicKeyReason, "never send a private key"},
		{"weak-rsa", clusterName, ichorv1alpha1.PurposeReader, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: weakDER})), ichorv1alpha1.BadPublicKeyReason, "1024 bits is too short"},
		// no ca-rotation operation rotate-1 hands credentials out
		{"rotation", clusterName, ichorv1alpha1.PurposeRotationCredentials, pub, ichorv1alpha1.UnknownOperationReason, `TalosOperation "rotate-1" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			createRequest(t, "deny-"+tc.name, tc.cluster, tc.purpose, tc.key, 0)
			tcr := waitAnswered(t, "deny-"+tc.name)

			c := apimeta.FindStatusCondition(tcr.Status.Conditions, ichorv1alpha1.DeniedCondition)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != tc.reason || !strings.Contains(c.Message, tc.msg) {
				t.Fatalf("Denied condition %+v; want reason %s with %q", c, tc.reason, tc.msg)
			}

			if tcr.Status.Certificate != "" || apimeta.IsStatusConditionTrue(tcr.Status.Conditions, ichorv1alpha1.IssuedCondition) {
				t.Fatal("a denied request holds a certificate")
			}

			if strings.Contains(c.Message, string(privDER)) || strings.Contains(c.Message, "BEGIN") {
				t.Fatalf("the message quotes the input: %q", c.Message)
			}

			// Denied is final: the status is not written again. The marker
			// that a later reconcile ran: a request created after it is
			// answered (one worker, first in first out).
			rv := tcr.ResourceVersion

			_, markerKey := newKey(t)
			createRequest(t, "marker-"+tc.name, clusterName, ichorv1alpha1.PurposeReader, markerKey, 0)
			waitAnswered(t, "marker-"+tc.name)

			again := &ichorv1alpha1.TalosCredentialRequest{}
			if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(tcr), again); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			} else if err == nil && again.ResourceVersion != rv {
				t.Fatalf("the denied request was written again: %+v", again.Status.Conditions)
			}
		})
	}
}

func TestAnsweredRequestsAreDeletedAfterTheirRetention(t *testing.T) {
	_, pub := newKey(t)
	createRequest(t, "expires-soon", clusterName, ichorv1alpha1.PurposeReader, pub, 2*time.Second)
	tcr := waitAnswered(t, "expires-soon")
	issuedCert(t, tcr)

	createRequest(t, "denied-soon", "nope", ichorv1alpha1.PurposeReader, pub, 0)
	waitAnswered(t, "denied-soon")

	for _, name := range []string{"expires-soon", "denied-soon"} {
		testenv.Eventually(t, waitTimeout, name+" deleted", func() error {
			err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &ichorv1alpha1.TalosCredentialRequest{})
			if apierrors.IsNotFound(err) {
				return nil
			}

			return fmt.Errorf("still there: %w", err)
		})
	}

	// An issued request is not deleted before its certificate expired.
	if time.Now().Before(tcr.Status.ExpiresAt.Add(retention)) {
		t.Fatalf("deleted before expiresAt+retention (%s)", tcr.Status.ExpiresAt.Add(retention))
	}
}

// TestRequesterIsCopiedFromTheWebhookStamp: status.requestedBy is the user the
// mutating webhook stamped (this package runs without webhooks, so the test
// stamps it), on an issued and on a denied request, and the certificate names
// that user; an unstamped request names nobody rather than guess.
func TestRequesterIsCopiedFromTheWebhookStamp(t *testing.T) {
	_, pub := newKey(t)
	create := func(name, cluster, requester string) {
		tcr := &ichorv1alpha1.TalosCredentialRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       ichorv1alpha1.TalosCredentialRequestSpec{ClusterName: cluster, Purpose: ichorv1alpha1.PurposeTalosconfigReader, PublicKey: pub},
		}
		if requester != "" {
			metav1.SetMetaDataAnnotation(&tcr.ObjectMeta, ichorv1alpha1.RequestedByAnnotation, requester)
		}

		if err := k8s.Create(context.Background(), tcr); err != nil {
			t.Fatal(err)
		}
	}

	create("by-otto", clusterName, "otto")
	create("by-otto-denied", "nope", "otto")
	create("by-nobody", clusterName, "")

	tcr := waitAnswered(t, "by-otto")
	if cert := issuedCert(t, tcr); tcr.Status.RequestedBy != "otto" || cert.Subject.CommonName != "otto" {
		t.Fatalf("status.requestedBy %q, certificate CN %q; want otto for both", tcr.Status.RequestedBy, cert.Subject.CommonName)
	}

	// The Issued Event names who asked (an os:reader talosconfig is a person's credential).
	testenv.Eventually(t, waitTimeout, "the Issued Event of by-otto naming otto", func() error {
		list := &eventsv1.EventList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return err
		}

		var issued, onCluster bool

		for _, e := range list.Items {
			if e.Regarding.Name == "by-otto" && e.Reason == ichorv1alpha1.IssuedReason {
				if !strings.Contains(e.Note, "talosconfig-reader) for TalosCluster "+clusterName+" to otto, valid until") {
					t.Fatalf("the Issued Event does not name otto: %q", e.Note)
				}

				issued = true
			}

			// and a Warning on the cluster: who holds a talosconfig, until when
			if e.Regarding.Kind == "TalosCluster" && e.Regarding.Name == clusterName && e.Related != nil && e.Related.Name == "by-otto" {
				if e.Type != corev1.EventTypeWarning || e.Reason != download.EventReason ||
					!strings.HasPrefix(e.Note, "otto downloads an os:reader talosconfig of cluster "+clusterName+", valid until ") {
					t.Fatalf("the cluster's Event of by-otto: %s %s %q", e.Type, e.Reason, e.Note)
				}

				onCluster = true
			}
		}

		if !issued || !onCluster {
			return fmt.Errorf("Issued Event %v, Warning on the TalosCluster %v", issued, onCluster)
		}

		return nil
	})

	denied := waitAnswered(t, "by-otto-denied")
	if !apimeta.IsStatusConditionTrue(denied.Status.Conditions, ichorv1alpha1.DeniedCondition) || denied.Status.RequestedBy != "otto" {
		t.Fatalf("a denied request: conditions %+v, status.requestedBy %q; want Denied, requested by otto", denied.Status.Conditions, denied.Status.RequestedBy)
	}

	nobody := waitAnswered(t, "by-nobody")
	if cert := issuedCert(t, nobody); nobody.Status.RequestedBy != "" || cert.Subject.CommonName != "ichor:talosconfig-reader:default/by-nobody" {
		t.Fatalf("an unstamped request: status.requestedBy %q, certificate CN %q; want empty and the request's name", nobody.Status.RequestedBy, cert.Subject.CommonName)
	}
}

// TestPausedStops_CredentialRequest: no certificate is signed for a cluster
// whose spec.paused is true (the request's Paused condition says why), and
// unpausing signs it.
func TestPausedStops_CredentialRequest(t *testing.T) {
	ctx := context.Background()

	held := testCluster("held", clusterName+"-secrets")
	held.Spec.Paused = true
	testenv.Must(t, k8s.Create(ctx, held))

	_, pub := newKey(t)
	createRequest(t, "paused-reader", held.Name, ichorv1alpha1.PurposeReader, pub, 0)

	tcr := &ichorv1alpha1.TalosCredentialRequest{}

	testenv.Eventually(t, waitTimeout, "the Paused condition", func() error {
		testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "paused-reader"}, tcr))

		if !apimeta.IsStatusConditionTrue(tcr.Status.Conditions, ichorv1alpha1.PausedCondition) {
			return fmt.Errorf("conditions %+v", tcr.Status.Conditions)
		}

		return nil
	})

	if tcr.Status.Certificate != "" || apimeta.FindStatusCondition(tcr.Status.Conditions, ichorv1alpha1.IssuedCondition) != nil {
		t.Fatalf("a request of a paused cluster was answered: %+v", tcr.Status)
	}

	testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(held), held))
	held.Spec.Paused = false
	testenv.Must(t, k8s.Update(ctx, held))

	tcr = waitAnswered(t, "paused-reader")
	issuedCert(t, tcr)

	if apimeta.FindStatusCondition(tcr.Status.Conditions, ichorv1alpha1.PausedCondition) != nil {
		t.Errorf("Paused stays after unpausing: %+v", tcr.Status.Conditions)
	}
}
