package bundle_test

import (
	"maps"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// Rule: the bundle Secret goes through a CA rotation in four steps, each of
// which changes nothing when run again (a controller that stops between its
// Secret write and its status write writes again): accept keeps the bundle
// issuing and accepts the new CAs; issue makes the next bundle the bundle,
// keeps the old one and accepts its CAs; drop accepts the bundle's alone;
// finish forgets the old bundle. Everything but the rotated CAs stays.
func TestRotationSteps(t *testing.T) {
	cluster := &ichorv1alpha1.TalosCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "prod"},
		Spec:       ichorv1alpha1.TalosClusterSpec{VersionContract: "v1.14", SecretsBundleRef: ichorv1alpha1.SecretReference{Name: "prod-secrets"}},
	}

	old, err := bundle.Generate(secrets.NewClock(), "v1.14")
	if err != nil {
		t.Fatal(err)
	}

	sec, err := bundle.Secret("ns", cluster.Spec.SecretsBundleRef, old)
	if err != nil {
		t.Fatal(err)
	}

	generated := 0
	next := func(current *secrets.Bundle) (*secrets.Bundle, error) {
		generated++

		return bundle.WithNewCAs(current, time.Now(), "v1.14", bundle.CASet{Talos: true, Kubernetes: true})
	}

	again := func(step string, f func() (bool, error)) {
		t.Helper()

		before := maps.Clone(sec.Data)

		changed, err := f()
		if err != nil || changed {
			t.Fatalf("%s run again: changed %t, %v", step, changed, err)
		}

		if !maps.EqualFunc(before, sec.Data, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Fatalf("%s run again changed the Secret", step)
		}
	}

	accept := func() (bool, error) { return bundle.RotationAccept(sec, cluster, next) }
	if changed, err := accept(); err != nil || !changed {
		t.Fatalf("accept: %t, %v", changed, err)
	}

	again("accept", accept)

	if generated != 1 {
		t.Fatalf("the new CAs were generated %d times, want once", generated)
	}

	issuing := load(t, sec, cluster)
	nb, err := bundle.LoadNext(sec, cluster)
	if err != nil {
		t.Fatal(err)
	}

	if string(issuing.Certs.OS.Crt) != string(old.Certs.OS.Crt) || string(nb.Certs.OS.Crt) == string(old.Certs.OS.Crt) ||
		string(nb.Certs.K8s.Crt) == string(old.Certs.K8s.Crt) {
		t.Fatal("after accept the bundle must still issue with the old CAs and the next one hold new ones")
	}

	if nb.Cluster.ID != old.Cluster.ID || nb.Secrets.BootstrapToken != old.Secrets.BootstrapToken || string(nb.Certs.Etcd.Crt) != string(old.Certs.Etcd.Crt) ||
		string(nb.Certs.K8sServiceAccount.Key) != string(old.Certs.K8sServiceAccount.Key) {
		t.Fatal("the next bundle changed more than the rotated CAs")
	}

	acceptedIs(t, sec, nb)

	issue := func() (bool, error) { return bundle.RotationIssue(sec, cluster) }
	if changed, err := issue(); err != nil || !changed {
		t.Fatalf("issue: %t, %v", changed, err)
	}

	again("issue", issue)

	if b := load(t, sec, cluster); string(b.Certs.OS.Crt) != string(nb.Certs.OS.Crt) || string(b.Certs.K8s.Crt) != string(nb.Certs.K8s.Crt) {
		t.Fatal("after issue the bundle is not the next one")
	}

	if p, err := bundle.LoadPrevious(sec, cluster); err != nil || p == nil || string(p.Certs.OS.Crt) != string(old.Certs.OS.Crt) {
		t.Fatalf("after issue the old bundle is not kept: %v", err)
	}

	acceptedIs(t, sec, old)

	if _, err := bundle.RotationAccept(sec, cluster, next); err == nil {
		t.Fatal("a new rotation was accepted while the old bundle is still kept")
	}

	if !bundle.RotationDrop(sec) || bundle.RotationDrop(sec) {
		t.Fatal("drop: changed the first time only")
	}

	if a, err := bundle.LoadAccepted(sec); err != nil || !a.Empty() {
		t.Fatalf("after drop something is still accepted: %+v, %v", a, err)
	}

	if !bundle.RotationFinish(sec) || bundle.RotationFinish(sec) {
		t.Fatal("finish: changed the first time only")
	}

	if len(sec.Data) != 1 {
		t.Fatalf("after the rotation the Secret holds %d keys, want the bundle alone", len(sec.Data))
	}
}

func load(t *testing.T, sec *corev1.Secret, c *ichorv1alpha1.TalosCluster) *secrets.Bundle {
	t.Helper()

	b, err := bundle.LoadForCluster(sec, c)
	if err != nil {
		t.Fatal(err)
	}

	return b
}

// acceptedIs checks that the accepted CAs are exactly those of b.
func acceptedIs(t *testing.T, sec *corev1.Secret, b *secrets.Bundle) {
	t.Helper()

	a, err := bundle.LoadAccepted(sec)
	if err != nil {
		t.Fatal(err)
	}

	if len(a.Talos) != 1 || a.Talos[0] != string(b.Certs.OS.Crt) || len(a.Kubernetes) != 1 || a.Kubernetes[0] != string(b.Certs.K8s.Crt) {
		t.Fatalf("accepted %d Talos and %d Kubernetes CAs, not the expected bundle's", len(a.Talos), len(a.Kubernetes))
	}
}
