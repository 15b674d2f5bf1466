package machinestate

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// bundleSecretsMax is how many bundle Secrets are kept: one per cluster,
// with room for a test process's many envtest clusters.
const bundleSecretsMax = 64

// bundleSecrets are the bundle Secrets last read, by namespace and name.
var bundleSecrets = &secretCache{byName: map[types.NamespacedName]*corev1.Secret{}}

// secretCache keeps at most bundleSecretsMax Secrets, dropping one at random
// (map order) when full. A kept Secret is shared and never changed: the
// readers of a bundle Secret (bundle.LoadTrust) only read it.
type secretCache struct {
	mu     sync.Mutex
	byName map[types.NamespacedName]*corev1.Secret
}

// readBundleSecret reads the bundle Secret at key through apiReader, the
// way a reader that always reads from the API server would, at a fraction
// of its cost: it asks the API server for the Secret's metadata only (the
// same `get` the controller's role grants), and reads the whole Secret
// only when its UID or resourceVersion differs from the one kept. The
// controller may get a Secret but not watch them all, so it has no
// informer to be told of a change; asking for the metadata on every read
// keeps each read as fresh as a full GET (a rotation's new bundle is seen
// by the very next render), while a thousand machines' periodic looks no
// longer transfer and decode the bundle each time.
func readBundleSecret(ctx context.Context, apiReader client.Reader, key types.NamespacedName) (*corev1.Secret, error) {
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))

	if err := apiReader.Get(ctx, key, meta); err != nil {
		return nil, err
	}

	if sec := bundleSecrets.get(key, meta.UID, meta.ResourceVersion); sec != nil {
		return sec, nil
	}

	sec := &corev1.Secret{}
	if err := apiReader.Get(ctx, key, sec); err != nil {
		return nil, err
	}

	bundleSecrets.put(key, sec)

	return sec, nil
}

// get is the kept Secret at key if it is the version uid/resourceVersion.
func (c *secretCache) get(key types.NamespacedName, uid types.UID, resourceVersion string) *corev1.Secret {
	c.mu.Lock()
	defer c.mu.Unlock()

	if sec := c.byName[key]; sec != nil && sec.UID == uid && sec.ResourceVersion == resourceVersion {
		return sec
	}

	return nil
}

func (c *secretCache) put(key types.NamespacedName, sec *corev1.Secret) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if _, ok := c.byName[key]; !ok && len(c.byName) >= bundleSecretsMax {
		for k := range c.byName {
			delete(c.byName, k)

			break
		}
	}

	c.byName[key] = sec
}
