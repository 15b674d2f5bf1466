// Package machinestate loads what a machine's desired state is made of: its
// TalosCluster, the cluster's secrets bundle and the cluster's patches, and
// renders the machine's configuration. The machine reconcilers share it.
package machinestate

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// ClusterIndex indexes TalosMachines and TalosConfigPatches by spec.clusterName.
const ClusterIndex = "spec.clusterName"

// State is a machine's cluster, bundle and render.
type State struct {
	Cluster *ichorv1alpha1.TalosCluster
	Bundle  *secrets.Bundle
	// Result is the render; nil from LoadTrusted.
	Result *render.Result
	// Storages are the namespace's TalosStorages the render read.
	Storages []ichorv1alpha1.TalosStorage
}

// StalledError is a state a person has to fix (a missing cluster or bundle, a
// render error); retrying changes nothing until they do. Its message names
// objects and keys, never secret content.
type StalledError struct{ msg string }

func (e *StalledError) Error() string { return e.msg }

// IsStalled reports whether err is a StalledError.
func IsStalled(err error) bool {
	var s *StalledError

	return errors.As(err, &s)
}

// Load reads the render input (render.LoadInput through c, the cache: the
// cluster, the namespace's patches and TalosStorages) and the bundle Secret
// (through apiReader: the controller may get a Secret, not list or watch them
// all), and renders.
//
// adjust, when given, changes the input before the render: the kubernetes
// operation sets the pins from its own, newer, status (Input.Kubernetes).
func Load(ctx context.Context, c client.Reader, apiReader client.Reader, m *ichorv1alpha1.TalosMachine, adjust ...func(*render.Input)) (*State, error) {
	return load(ctx, c, apiReader, m, nil, adjust...)
}

func load(ctx context.Context, c client.Reader, apiReader client.Reader, m *ichorv1alpha1.TalosMachine, kept *Renders, adjust ...func(*render.Input)) (*State, error) {
	in, err := render.LoadInput(ctx, c, m)
	if err != nil {
		if errors.Is(err, render.ErrClusterNotFound) {
			return nil, &StalledError{fmt.Sprintf("TalosCluster %q not found", m.Spec.ClusterName)}
		}

		return nil, err
	}

	for _, f := range adjust {
		f(&in)
	}

	trust, secret, err := loadTrustOf(ctx, apiReader, in.Cluster, 0)
	if err != nil {
		return nil, err
	}

	b := trust.Bundle
	in.Bundle, in.Accepted, in.Keys = b, trust.Accepted, trust.Keys

	st := &State{Cluster: in.Cluster, Bundle: b, Storages: in.Storages}

	var key [sha256.Size]byte
	if kept != nil {
		if key, err = inputKey(in, secret); err != nil {
			return nil, err
		}

		if st.Result = kept.get(m.UID, key); st.Result != nil {
			return st, nil
		}
	}

	if st.Result, err = render.Render(in); err != nil {
		return nil, &StalledError{err.Error()}
	}

	if kept != nil {
		kept.put(m.UID, key, st.Result)
	}

	return st, nil
}

// LoadTrusted reads the machine's cluster and its secrets bundle (with the
// CAs accepted beside it), and renders nothing: State.Result is nil. It is
// what a step that only talks to the node needs; rendering costs
// milliseconds, which a look at a thousand machines every half minute turns
// into a tenth of a core.
func LoadTrusted(ctx context.Context, c client.Reader, apiReader client.Reader, m *ichorv1alpha1.TalosMachine) (*State, error) {
	return loadTrusted(ctx, c, apiReader, m, 0)
}

// LookBundleAge is how old a read of the bundle Secret LoadTrustedForLook
// may reuse: the API server said it was current less than this ago.
const LookBundleAge = 2 * time.Second

// LoadTrustedForLook is LoadTrusted for a periodic look that only dials the
// node and reads from it (the lifecycle's monitor): it may reuse a read of
// the bundle Secret the API server confirmed less than LookBundleAge ago,
// instead of asking again. At a thousand machines five such looks a second
// each asked the API server for the Secret's metadata, the largest item of
// the idle profile (bench:scale). A look that reuses a bundle a second old
// dials with the trust of a second ago: the dial fails and the next look
// dials again, it never reaches another machine (the look checks the node's
// identity over the authenticated API). Everything that renders, or sends a
// node something, reads the Secret fresh.
func LoadTrustedForLook(ctx context.Context, c client.Reader, apiReader client.Reader, m *ichorv1alpha1.TalosMachine) (*State, error) {
	return loadTrusted(ctx, c, apiReader, m, LookBundleAge)
}

func loadTrusted(ctx context.Context, c client.Reader, apiReader client.Reader, m *ichorv1alpha1.TalosMachine, maxAge time.Duration) (*State, error) {
	cl := &ichorv1alpha1.TalosCluster{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.ClusterName}, cl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &StalledError{fmt.Sprintf("TalosCluster %q not found", m.Spec.ClusterName)}
		}

		return nil, fmt.Errorf("reading TalosCluster %s/%s: %w", m.Namespace, m.Spec.ClusterName, err)
	}

	trust, _, err := loadTrustOf(ctx, apiReader, cl, maxAge)
	if err != nil {
		return nil, err
	}

	return &State{Cluster: cl, Bundle: trust.Bundle}, nil
}

// LoadBundle reads and parses the cluster's secrets bundle (LoadTrust).
func LoadBundle(ctx context.Context, apiReader client.Reader, cl *ichorv1alpha1.TalosCluster) (*secrets.Bundle, error) {
	b, _, err := LoadTrust(ctx, apiReader, cl)

	return b, err
}

// LoadTrust reads and parses the cluster's secrets bundle and the CAs its
// nodes accept beside the bundle's while a CA rotation runs
// (bundle.AcceptedKey), and makes every Talos connection with this bundle
// trust those too (talos.Accept).
func LoadTrust(ctx context.Context, apiReader client.Reader, cl *ichorv1alpha1.TalosCluster) (*secrets.Bundle, bundle.Accepted, error) {
	t, err := loadTrust(ctx, apiReader, cl)

	return t.Bundle, t.Accepted, err
}

// loadTrust is LoadTrust with a key rotation's keys (bundle.KeysKey).
func loadTrust(ctx context.Context, apiReader client.Reader, cl *ichorv1alpha1.TalosCluster) (bundle.Trust, error) {
	t, _, err := loadTrustOf(ctx, apiReader, cl, 0)

	return t, err
}

// loadTrustOf is loadTrust, and which version of the bundle Secret it read
// (its UID and resourceVersion); maxAge is readBundleSecret's.
func loadTrustOf(ctx context.Context, apiReader client.Reader, cl *ichorv1alpha1.TalosCluster, maxAge time.Duration) (bundle.Trust, string, error) {
	sec, err := readBundleSecret(ctx, apiReader, types.NamespacedName{Namespace: cl.Namespace, Name: cl.Spec.SecretsBundleRef.Name}, maxAge)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return bundle.Trust{}, "", &StalledError{fmt.Sprintf("secrets bundle Secret %q not found", cl.Spec.SecretsBundleRef.Name)}
		}

		return bundle.Trust{}, "", err
	}

	t, err := bundle.LoadTrust(sec, cl)
	if err != nil {
		// bundle's errors name the Secret and key, never its content.
		return bundle.Trust{}, "", &StalledError{err.Error()}
	}

	talos.Accept(t.Bundle.Certs.OS.Crt, t.Accepted.Talos)

	return t, string(sec.UID) + "/" + sec.ResourceVersion, nil
}

// Machines lists the TalosMachines of a cluster (through the ClusterIndex)
// that keep accepts; a nil keep accepts all.
func Machines(ctx context.Context, c client.Reader, namespace, cluster string, keep func(*ichorv1alpha1.TalosMachine) bool) ([]ichorv1alpha1.TalosMachine, error) {
	var list ichorv1alpha1.TalosMachineList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{ClusterIndex: cluster}); err != nil {
		return nil, err
	}

	if keep == nil {
		return list.Items, nil
	}

	return slices.DeleteFunc(list.Items, func(m ichorv1alpha1.TalosMachine) bool { return !keep(&m) }), nil
}

// RunsOn says whether node (the controller's own Node; empty outside a
// cluster) is one of cl's machines: cl is the cluster Ichor runs in. It lists
// without the ClusterIndex, for managers that do not register it.
func RunsOn(ctx context.Context, c client.Reader, cl *ichorv1alpha1.TalosCluster, node string) (bool, error) {
	if node == "" {
		return false, nil
	}

	var list ichorv1alpha1.TalosMachineList
	if err := c.List(ctx, &list, client.InNamespace(cl.Namespace)); err != nil {
		return false, err
	}

	for _, m := range list.Items {
		if m.Spec.ClusterName == cl.Name && strings.EqualFold(m.Status.NodeName, node) {
			return true, nil
		}
	}

	return false, nil
}

// RegisterIndexes registers the field indexes the reconcilers list by, once
// per manager: cmd/main.go calls it before any reconciler is set up, and so
// does every test suite that builds a manager.
func RegisterIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	for _, obj := range []client.Object{&ichorv1alpha1.TalosMachine{}, &ichorv1alpha1.TalosConfigPatch{}} {
		if err := indexer.IndexField(ctx, obj, ClusterIndex, IndexCluster); err != nil {
			return err
		}
	}

	return nil
}

// IndexCluster is the ClusterIndex function.
func IndexCluster(o client.Object) []string {
	switch v := o.(type) {
	case *ichorv1alpha1.TalosMachine:
		return []string{v.Spec.ClusterName}
	case *ichorv1alpha1.TalosConfigPatch:
		return []string{v.Spec.ClusterName}
	default:
		return nil
	}
}
