// Package nodes implements the UI API's NodeService: read-only views of a
// running node's Talos state (services, logs, disks, links, kernel log, etcd
// members). ichor-ui reads the nodes with a short-lived os:reader client
// certificate the controller signs for a key pair held only in this process
// (a TalosCredentialRequest created under ichor-ui's own identity), after
// checking, as the signed-in user, that they may get the TalosCluster
// (architecture, "Trust").
package nodes

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// LabelManagedBy marks the requests ichor-ui makes for its own reads.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "ichor-ui"
)

// Credentials is ichor-ui's os:reader certificate for one cluster: a key
// pair made in memory (the private key never leaves the process and is never
// logged), signed by the controller through a TalosCredentialRequest. The
// certificate is reused until two thirds of its lifetime, then renewed in the
// background while the old one still serves; concurrent callers share one
// request in flight.
type Credentials struct {
	// Client acts as ichor-ui itself (its ServiceAccount): it creates, reads
	// and deletes its own requests.
	Client client.Client
	// Namespace and ClusterName name the TalosCluster.
	Namespace, ClusterName string
	// Duration asks for a lifetime; zero leaves it to the controller (ten minutes).
	Duration time.Duration
	// Timeout bounds the wait for the controller's answer; zero means 30 s.
	Timeout time.Duration

	mu       sync.Mutex
	cur      *Issued
	inflight *inflight
	// the last failed request: callers get its error for failureHold rather
	// than a new request each (a denied request must not become a storm)
	failed   error
	failedAt time.Time
}

// failureHold is how long a failed request's error is returned before another is made.
const failureHold = 10 * time.Second

// Issued is a signed certificate with its private key, and the CA to verify the nodes with.
type Issued struct {
	// Cert is the client certificate and key.
	Cert tls.Certificate
	// Roots holds the Talos API CA.
	Roots *stdx509.CertPool
	// Request names the TalosCredentialRequest.
	Request string
	// Role is the Talos role signed for.
	Role string

	issuedAt, expiresAt time.Time
}

// ExpiresAt is when the certificate expires.
func (i *Issued) ExpiresAt() time.Time { return i.expiresAt }

type inflight struct {
	done chan struct{}
	res  *Issued
	err  error
}

// renewAt is when a certificate is renewed: at two thirds of its lifetime.
func (i *Issued) renewAt() time.Time {
	return i.issuedAt.Add(i.expiresAt.Sub(i.issuedAt) * 2 / 3)
}

// usable is how long before its expiry a certificate is still handed out.
const usableMargin = 15 * time.Second

// Get returns a certificate valid for at least a few more seconds, requesting
// one when there is none (callers wait, sharing the request) and renewing it
// past two thirds of its lifetime (callers keep the current one meanwhile).
func (c *Credentials) Get(ctx context.Context) (*Issued, error) {
	now := time.Now()

	c.mu.Lock()
	cur := c.cur

	if cur != nil && now.Before(cur.renewAt()) {
		c.mu.Unlock()

		return cur, nil
	}

	usable := cur != nil && now.Before(cur.expiresAt.Add(-usableMargin))

	f := c.inflight
	if f == nil && c.failed != nil && now.Sub(c.failedAt) < failureHold {
		err := c.failed
		c.mu.Unlock()

		if usable {
			return cur, nil
		}

		return nil, err
	}

	if f == nil {
		f = &inflight{done: make(chan struct{})}
		c.inflight = f

		go c.request(f, cur) //nolint:gosec // the shared request outlives any one caller: it has its own bounded context
	}
	c.mu.Unlock()

	if usable {
		return cur, nil
	}

	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// request makes a key pair and a request, waits for the answer, and
// publishes the certificate; the superseded request is deleted.
func (c *Credentials) request(f *inflight, prev *Issued) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}

	// Not the caller's context: a caller that gives up does not cancel the
	// request the others wait for.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	res, err := c.issue(ctx)

	c.mu.Lock()
	if err == nil {
		c.cur, c.failed = res, nil
	} else {
		c.failed, c.failedAt = err, time.Now()
	}
	c.inflight = nil
	c.mu.Unlock()

	f.res, f.err = res, err
	close(f.done)

	if err == nil && prev != nil {
		c.deleteRequest(ctx, prev.Request)
	}
}

func (c *Credentials) deleteRequest(ctx context.Context, name string) {
	deleteRequest(ctx, c.Client, c.Namespace, name)
}

func (c *Credentials) issue(ctx context.Context) (*Issued, error) {
	return issue(ctx, issueRequest{
		create: c.Client, read: c.Client, namespace: c.Namespace, cluster: c.ClusterName,
		purpose: ichorv1alpha1.PurposeReader, generateName: "ichor-ui-reader-", duration: c.Duration,
		what: "ichor-ui's reader", createForbidden: "its ClusterRole ichor-ui needs create on taloscredentialrequests",
	})
}

// issueRequest is one TalosCredentialRequest to make and wait for.
type issueRequest struct {
	// create writes the request: ichor-ui itself for its reads, the
	// signed-in user (impersonated) for a download, so that the webhook
	// checks that user's permission; read waits for the answer (ichor-ui).
	create, read          client.Client
	namespace, cluster    string
	purpose, generateName string
	duration              time.Duration
	what, createForbidden string
}

// issue makes a key pair in memory, asks the controller to sign its public
// half, waits for the answer and returns the certificate with its key. The
// private key never leaves the process.
func issue(ctx context.Context, r issueRequest) (*Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "making a key pair: %v", err)
	}

	pubDER, err := stdx509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encoding the public key: %v", err)
	}

	tcr := &ichorv1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: r.namespace, GenerateName: r.generateName,
			Labels: map[string]string{LabelManagedBy: managedBy},
		},
		Spec: ichorv1alpha1.TalosCredentialRequestSpec{
			ClusterName: r.cluster,
			Purpose:     r.purpose,
			PublicKey:   string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})),
		},
	}
	if r.duration > 0 {
		tcr.Spec.Duration = &metav1.Duration{Duration: r.duration}
	}

	if err := r.create.Create(ctx, tcr); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, status.Errorf(codes.PermissionDenied,
				"%s TalosCredentialRequest was refused: %s; %s", r.what, apiMessage(err), r.createForbidden)
		}

		return nil, status.Errorf(codes.Unavailable, "creating %s TalosCredentialRequest: %s", r.what, apiMessage(err))
	}

	del := func() { deleteRequest(context.WithoutCancel(ctx), r.read, r.namespace, tcr.Name) }

	answered, err := wait(ctx, r.read, r.namespace, tcr.Name, r.what)
	if err != nil {
		del()

		return nil, err
	}

	keyDER, err := stdx509.MarshalECPrivateKey(key)
	if err != nil {
		del()

		return nil, status.Errorf(codes.Internal, "encoding the private key: %v", err)
	}

	pair, err := tls.X509KeyPair([]byte(answered.Status.Certificate), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		del()

		return nil, status.Errorf(codes.Internal, "the certificate of TalosCredentialRequest %s does not match ichor-ui's key: %v", tcr.Name, err)
	}

	roots := stdx509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(answered.Status.CA)) {
		del()

		return nil, status.Errorf(codes.Internal, "the CA of TalosCredentialRequest %s does not parse", tcr.Name)
	}

	leaf, err := stdx509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		del()

		return nil, status.Errorf(codes.Internal, "the certificate of TalosCredentialRequest %s does not parse: %v", tcr.Name, err)
	}

	pair.Leaf = leaf

	return &Issued{
		Cert: pair, Roots: roots, Request: tcr.Name, Role: answered.Status.Role,
		issuedAt: time.Now(), expiresAt: leaf.NotAfter,
	}, nil
}

func deleteRequest(ctx context.Context, c client.Client, namespace, name string) {
	tcr := &ichorv1alpha1.TalosCredentialRequest{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	// Best effort: the controller deletes answered requests after they expire anyway.
	_ = client.IgnoreNotFound(c.Delete(ctx, tcr))
}

// wait polls the request with backoff until the controller answers.
func wait(ctx context.Context, c client.Client, namespace, name, what string) (*ichorv1alpha1.TalosCredentialRequest, error) {
	delay := 50 * time.Millisecond
	tcr := &ichorv1alpha1.TalosCredentialRequest{}

	for {
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, tcr)

		switch {
		case err == nil:
			if apimeta.IsStatusConditionTrue(tcr.Status.Conditions, ichorv1alpha1.IssuedCondition) && tcr.Status.Certificate != "" {
				return tcr, nil
			}

			if d := apimeta.FindStatusCondition(tcr.Status.Conditions, ichorv1alpha1.DeniedCondition); d != nil && d.Status == metav1.ConditionTrue {
				return nil, status.Errorf(codes.FailedPrecondition,
					"the controller denied %s credential (TalosCredentialRequest %s): %s", what, name, d.Message)
			}
		case apierrors.IsNotFound(err):
			return nil, status.Errorf(codes.Unavailable, "%s TalosCredentialRequest %s disappeared before it was answered; try again", what, name)
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		default:
			// transient: keep polling until the deadline
		}

		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.Unavailable,
				"the controller did not sign %s credential (TalosCredentialRequest %s) in time: is ichor-controller running?", what, name)
		case <-time.After(delay):
		}

		delay = min(delay*2, 2*time.Second)
	}
}

func apiMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Message != "" {
		return se.Status().Message
	}

	return fmt.Sprint(err)
}
