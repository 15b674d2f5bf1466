package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// `ichor cluster rotate-keys`: --dry-run says what the rotation does and
// changes nothing; --service-account-only with --secretbox-only and an
// unconfirmed run create nothing; a cluster on the v1.12 contract is refused
// with the reason; a confirmed --secretbox-only run creates a key-rotation
// of the secretbox key alone, follows it to its end and stores the bundle
// the cluster then runs. The suite runs no controller: the test ends the
// operation as the controller does (the controller's side is
// TestKeyRotation in the emulated world).
func TestRotateKeysCommand(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "rotate-keys")
	c := newCluster(ns, "prod")
	must(t, k8s.Create(ctx, c))

	b, err := bundle.Generate(secrets.NewClock(), "v1.14")
	must(t, err)

	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, b)
	must(t, err)
	must(t, k8s.Create(ctx, sec))

	ops := func() []ichorv1alpha1.TalosOperation {
		list := &ichorv1alpha1.TalosOperationList{}
		must(t, k8s.List(ctx, list, client.InNamespace(ns)))

		return list.Items
	}

	out := mustSucceed(t, ichor(t, "cluster", "rotate-keys", "prod", "-n", ns, "--dry-run")).stdout
	for _, want := range []string{"This rotates the keys of cluster prod", "write every Secret again", "tokens of the old key stop working",
		"~/.ichor/clusters/prod", "Nothing was changed (--dry-run)."} {
		if !strings.Contains(out, want) {
			t.Fatalf("--dry-run: no %q in:\n%s", want, out)
		}
	}

	mustFail(t, ichor(t, "cluster", "rotate-keys", "prod", "-n", ns, "--service-account-only", "--secretbox-only"), "exclude each other", "nothing was changed")
	mustFail(t, ichorWith(t, invocation{stdin: "prd\n"}, "cluster", "rotate-keys", "prod", "-n", ns), "not confirmed", "nothing was changed")

	old := newCluster(ns, "old")
	old.Spec.VersionContract = "v1.12"
	must(t, k8s.Create(ctx, old))
	mustFail(t, ichorWith(t, invocation{stdin: "old\n"}, "cluster", "rotate-keys", "old", "-n", ns), `contract "v1.12"`, "stay as they are")

	if n := len(ops()); n != 0 {
		t.Fatalf("refused runs created %d operation(s)", n)
	}

	home := t.TempDir()
	done := make(chan result, 1)

	go func() {
		done <- ichorWith(t, invocation{stdin: "prod\n", env: []string{"ICHOR_HOME=" + home, "ICHOR_PASSPHRASE=correct horse battery staple"}},
			"cluster", "rotate-keys", "prod", "-n", ns, "--secretbox-only", "--timeout", "90s")
	}()

	var op ichorv1alpha1.TalosOperation

	waitFor(t, "the key-rotation", func() error {
		list := ops()
		if len(list) != 1 {
			return fmt.Errorf("%d operations", len(list))
		}

		op = list[0]

		return nil
	})

	if op.Spec.Type != ichorv1alpha1.OperationKeyRotation || op.Spec.ClusterName != "prod" || op.Spec.KeyRotation == nil ||
		op.Spec.KeyRotation.ServiceAccount || !op.Spec.KeyRotation.Secretbox {
		t.Fatalf("the operation: %+v", op.Spec)
	}

	// The rotation ends; the bundle Secret holds the new bundle.
	next, err := bundle.WithNewKeys(b, time.Now(), "v1.14", false, true)
	must(t, err)

	sec.Data[bundle.DefaultKey], err = bundle.Encode(next)
	must(t, err)
	must(t, k8s.Update(ctx, sec))

	now := metav1.Now()
	op.Status.Phase, op.Status.CompletedAt = ichorv1alpha1.OperationSucceeded, &now
	must(t, k8s.Status().Update(ctx, &op))

	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("ichor cluster rotate-keys did not end")
	}

	mustSucceed(t, r)

	if !strings.Contains(r.stdout, "The keys of cluster prod are rotated; the new bundle is stored") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}

	s := &secretstore.Store{Cluster: "prod", Dir: filepath.Join(home, "clusters", "prod")}
	contents, err := s.Load(func() (string, error) { return "correct horse battery staple", nil })
	must(t, err)

	stored, err := bundle.Decode(contents.Bundle, "v1.14")
	must(t, err)

	if stored.Secrets.SecretboxEncryptionSecret != next.Secrets.SecretboxEncryptionSecret {
		t.Fatal("the stored bundle is not the one the cluster runs after the rotation")
	}
}
