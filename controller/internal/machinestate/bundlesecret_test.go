package machinestate

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/tools/testenv"
)

// countingReader passes every Get to the real API server's client and
// counts the whole-Secret reads and the metadata-only ones.
type countingReader struct {
	client.Reader

	mu         sync.Mutex
	full, meta int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.mu.Lock()
	switch obj.(type) {
	case *corev1.Secret:
		r.full++
	case *metav1.PartialObjectMetadata:
		r.meta++
	}
	r.mu.Unlock()

	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *countingReader) counts() (full, meta int) {
	r.mu.Lock()
	defer r.mu.Unlock()

	return r.full, r.meta
}

// TestBundleSecretReadOnceFreshAlways: the bundle Secret is read whole once
// and then only its metadata while it does not change; a change of its
// data, and a Secret deleted and made again under the same name with the
// same data, are read whole by the very next read; a missing Secret is the
// API server's NotFound.
func TestBundleSecretReadOnceFreshAlways(t *testing.T) {
	ctx := context.Background()
	const ns = "bundle-secret"

	testenv.Must(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	key := types.NamespacedName{Namespace: ns, Name: "prod-bundle"}
	r := &countingReader{Reader: env.Client}

	read := func(step, want string, wantFull int) *corev1.Secret {
		t.Helper()

		sec, err := readBundleSecret(ctx, r, key)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}

		if got := string(sec.Data["bundle"]); got != want {
			t.Errorf("%s: the read Secret holds %q, the API server %q", step, got, want)
		}

		if full, _ := r.counts(); full != wantFull {
			t.Errorf("%s: %d whole read(s) of the Secret so far, want %d", step, full, wantFull)
		}

		return sec
	}

	if _, err := readBundleSecret(ctx, r, key); !apierrors.IsNotFound(err) {
		t.Fatalf("a missing Secret: %v, want NotFound", err)
	}

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}, Data: map[string][]byte{"bundle": []byte("one")}}
	testenv.Must(t, env.Client.Create(ctx, sec))

	first := read("first read", "one", 1)
	read("unchanged", "one", 1)
	read("unchanged again", "one", 1)

	if _, meta := r.counts(); meta != 4 {
		t.Errorf("%d metadata read(s), want one per read (4)", meta)
	}

	sec.Data["bundle"] = []byte("two")
	testenv.Must(t, env.Client.Update(ctx, sec))

	read("after an update", "two", 2)
	read("unchanged after the update", "two", 2)

	testenv.Must(t, env.Client.Delete(ctx, sec))

	again := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}, Data: map[string][]byte{"bundle": []byte("two")}}
	testenv.Must(t, env.Client.Create(ctx, again))

	if got := read("made again", "two", 3); got.UID == first.UID {
		t.Errorf("the Secret made again was read as the first one (UID %s)", got.UID)
	}
}
