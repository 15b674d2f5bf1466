package machinestate

import (
	"context"
	"sync"
	"testing"
	"time"

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

		sec, err := readBundleSecret(ctx, r, key, 0)
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

	if _, err := readBundleSecret(ctx, r, key, 0); !apierrors.IsNotFound(err) {
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

// TestBundleSecretLookReusesARecentRead: a look (maxAge) takes the Secret
// the API server confirmed less than maxAge ago without asking again, only
// through the reader that read it; past maxAge it asks, and a read without
// maxAge always asks and sees a change at once.
func TestBundleSecretLookReusesARecentRead(t *testing.T) {
	ctx := context.Background()
	const ns = "bundle-secret-look"

	testenv.Must(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	key := types.NamespacedName{Namespace: ns, Name: "prod-bundle"}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}, Data: map[string][]byte{"bundle": []byte("one")}}
	testenv.Must(t, env.Client.Create(ctx, sec))

	r, other := &countingReader{Reader: env.Client}, &countingReader{Reader: env.Client}

	read := func(step string, via *countingReader, maxAge time.Duration, want string, wantAsked int) {
		t.Helper()

		got, err := readBundleSecret(ctx, via, key, maxAge)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}

		if string(got.Data["bundle"]) != want {
			t.Errorf("%s: read %q, want %q", step, got.Data["bundle"], want)
		}

		if full, meta := via.counts(); full+meta != wantAsked {
			t.Errorf("%s: the API server was asked %d time(s) through this reader, want %d", step, full+meta, wantAsked)
		}
	}

	read("first look", r, time.Hour, "one", 2)
	read("a look within the hour", r, time.Hour, "one", 2)

	sec.Data["bundle"] = []byte("two")
	testenv.Must(t, env.Client.Update(ctx, sec))

	read("a look within the hour after a change", r, time.Hour, "one", 2)
	read("a read that does not look", r, 0, "two", 4)
	read("a look past its age", r, time.Nanosecond, "two", 5)
	read("a look through another reader", other, time.Hour, "two", 1)
}
