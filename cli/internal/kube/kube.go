// Package kube connects the CLI to the API server of the management cluster:
// kubeconfig loading (--kubeconfig, KUBECONFIG, ~/.kube/config, --context),
// the default namespace, the caller's user name, and errors that say what to
// do.
package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// Options select the cluster and namespace.
type Options struct {
	// Kubeconfig is --kubeconfig; empty means KUBECONFIG, then ~/.kube/config.
	Kubeconfig string
	// Context is --context; empty means the kubeconfig's current context.
	Context string
	// Namespace is -n; empty means the context's namespace, then "default".
	Namespace string
}

// Conn is a connection to the API server.
type Conn struct {
	// Client reads, writes and watches.
	Client client.WithWatch
	// Config is the REST configuration.
	Config *rest.Config
	// Namespace is the namespace commands act in.
	Namespace string
}

// Scheme knows client-go's types and Ichor's CRDs.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := ichorv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Connect loads the kubeconfig and builds a client. It does not contact the server.
func Connect(o Options) (*Conn, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.Context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)

	raw, err := cc.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if o.Context != "" {
		if _, ok := raw.Contexts[o.Context]; !ok {
			return nil, fmt.Errorf("context %q is not in the kubeconfig; contexts there: %s", o.Context, names(raw.Contexts))
		}
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, errors.New("no kubeconfig: pass --kubeconfig FILE, set KUBECONFIG, or write ~/.kube/config; " +
				"the admin kubeconfig of a cluster Ichor created is kept in ~/.ichor/clusters/NAME/kubeconfig.age (`age -d` opens it)")
		}
		return nil, fmt.Errorf("the kubeconfig cannot be used: %w", err)
	}
	ns := o.Namespace
	if ns == "" {
		ns, _, err = cc.Namespace()
		if err != nil {
			return nil, fmt.Errorf("reading the namespace of the kubeconfig context: %w", err)
		}
	}
	// Admission warnings (an override recorded, a deprecation) go to the
	// person, once each; controller-runtime's own logging is not wanted.
	cfg.WarningHandler = rest.NewWarningWriter(os.Stderr, rest.WarningWriterOptions{Deduplicate: true})
	ctrllog.SetLogger(logr.Discard())
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("building a client for %s: %w", cfg.Host, err)
	}
	return &Conn{Client: c, Config: cfg, Namespace: ns}, nil
}

func names[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// WhoAmI returns the user name the API server sees for this connection
// (a SelfSubjectReview), as admission records it in spec.approval.decidedBy.
func (c *Conn) WhoAmI(ctx context.Context) (string, error) {
	r := &authenticationv1.SelfSubjectReview{}
	if err := c.Client.Create(ctx, r); err != nil {
		return "", c.Explain(err, "asking the API server who you are (SelfSubjectReview)")
	}
	if r.Status.UserInfo.Username == "" {
		return "", errors.New("the API server did not say who you are (empty SelfSubjectReview): check the kubeconfig's credentials")
	}
	return r.Status.UserInfo.Username, nil
}

// Explain turns a client error into one that says what to do. doing is what
// the CLI was doing ("reading TalosMachine prod/cp-1").
func (c *Conn) Explain(err error, doing string) error {
	if err == nil {
		return nil
	}
	switch {
	case meta.IsNoMatchError(err) || isNoKind(err):
		return fmt.Errorf("%s: the API server at %s does not know Ichor's resources; is Ichor installed there, "+
			"and is this the right cluster (--context)?", doing, c.Config.Host)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s: the API server at %s does not accept the kubeconfig's credentials (%s); refresh them or pick another --context",
			doing, c.Config.Host, apierrors.ReasonForError(err))
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: %s; ask a cluster administrator for the role that allows it (ichor:viewer reads, ichor:operator writes)",
			doing, apiMessage(err))
	case apierrors.IsConflict(err):
		return fmt.Errorf("%s: someone else changed the object at the same time; run the command again", doing)
	case isUnreachable(err):
		return fmt.Errorf("%s: cannot reach the API server at %s (%w); is the cluster up, and is the kubeconfig (--kubeconfig, --context) current?",
			doing, c.Config.Host, rootCause(err))
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return fmt.Errorf("%s: the API server refused the change: %s", doing, apiMessage(err))
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		// Admission webhook refusals say what to do themselves.
		return fmt.Errorf("%s: %s", doing, apiMessage(err))
	}
	return fmt.Errorf("%s: %w", doing, err)
}

func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

func isNoKind(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	return apierrors.IsNotFound(err) && status.Status().Details != nil && status.Status().Details.Name == "" &&
		strings.Contains(status.Status().Message, "the server could not find the requested resource")
}

func isUnreachable(err error) bool {
	var netErr net.Error
	var urlErr *url.Error
	var opErr *net.OpError
	return errors.As(err, &opErr) || errors.As(err, &urlErr) || errors.As(err, &netErr)
}

func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}
