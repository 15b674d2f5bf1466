package machinestate

import (
	"context"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// bundleSecretsMax is how many bundle Secrets are kept: one per cluster,
// with room for a test process's many envtest clusters.
const bundleSecretsMax = 64

// bundleSecrets are the bundle Secrets last read, by namespace and name.
var bundleSecrets = &secretCache{byName: map[types.NamespacedName]keptSecret{}}

// secretCache keeps at most bundleSecretsMax Secrets, dropping one at random
// (map order) when full. A kept Secret is shared and never changed: the
// readers of a bundle Secret (bundle.LoadTrust) only read it.
type secretCache struct {
	mu     sync.Mutex
	byName map[types.NamespacedName]keptSecret
}

// keptSecret is a Secret read, through which reader, and when the API
// server last said it was current.
type keptSecret struct {
	sec     *corev1.Secret
	reader  client.Reader
	checked time.Time
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
//
// A positive maxAge lets a read that only dials (LookBundleAge) take the
// kept Secret without asking at all when the API server said it was current
// less than maxAge ago, through the same reader.
func readBundleSecret(ctx context.Context, apiReader client.Reader, key types.NamespacedName, maxAge time.Duration) (*corev1.Secret, error) {
	if maxAge > 0 {
		if sec := bundleSecrets.recent(key, apiReader, maxAge); sec != nil {
			return sec, nil
		}
	}

	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))

	if err := apiReader.Get(ctx, key, meta); err != nil {
		return nil, err
	}

	if sec := bundleSecrets.current(key, apiReader, meta.UID, meta.ResourceVersion); sec != nil {
		return sec, nil
	}

	sec := &corev1.Secret{}
	if err := apiReader.Get(ctx, key, sec); err != nil {
		return nil, err
	}

	bundleSecrets.put(key, apiReader, sec)

	return sec, nil
}

// recent is the kept Secret at key if it was read through reader and the
// API server said it was current less than maxAge ago.
func (c *secretCache) recent(key types.NamespacedName, reader client.Reader, maxAge time.Duration) *corev1.Secret {
	c.mu.Lock()
	defer c.mu.Unlock()

	if k, ok := c.byName[key]; ok && sameReader(k.reader, reader) && time.Since(k.checked) < maxAge {
		return k.sec
	}

	return nil
}

// current is the kept Secret at key if it is the version uid/resourceVersion,
// and notes that the API server just said so.
func (c *secretCache) current(key types.NamespacedName, reader client.Reader, uid types.UID, resourceVersion string) *corev1.Secret {
	c.mu.Lock()
	defer c.mu.Unlock()

	k, ok := c.byName[key]
	if !ok || k.sec.UID != uid || k.sec.ResourceVersion != resourceVersion {
		return nil
	}

	k.reader, k.checked = reader, time.Now()
	c.byName[key] = k

	return k.sec
}

func (c *secretCache) put(key types.NamespacedName, reader client.Reader, sec *corev1.Secret) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if _, ok := c.byName[key]; !ok && len(c.byName) >= bundleSecretsMax {
		for k := range c.byName {
			delete(c.byName, k)

			break
		}
	}

	c.byName[key] = keptSecret{sec: sec, reader: reader, checked: time.Now()}
}

// sameReader says whether a and b are the same reader: the same pointer
// (the manager's API reader is one), so that a Secret read from one API
// server is never handed out for another (a test process runs several).
func sameReader(a, b client.Reader) bool {
	t := reflect.TypeOf(a)
	if t == nil || t != reflect.TypeOf(b) || t.Kind() != reflect.Pointer {
		return false
	}

	return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}
