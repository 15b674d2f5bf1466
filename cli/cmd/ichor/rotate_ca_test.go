package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/credential"
)

// `ichor cluster rotate-ca`: --dry-run says what the rotation does and
// changes nothing; an administrator without the (unbound) rotation
// credentials role is refused before anything is created, with the command
// that grants it; an unconfirmed run creates nothing; a confirmed run
// creates the ca-rotation, and when it waits in AwaitingCredentials asks for
// its credentials, stores the talosconfig and kubeconfig of the new CAs in
// the secrets store, follows the rotation to its end and stores the bundle
// the cluster then runs. The suite runs no controller: the test moves the
// operation and signs the request as the controller does (the controller's
// own side is TestCARotation in the emulated world).
func TestRotateCACommand(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "rotate-ca")
	c := newCluster(ns, "prod")
	must(t, k8s.Create(ctx, c))

	b, err := bundle.Generate(secrets.NewClock(), "v1.14")
	must(t, err)

	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, b)
	must(t, err)
	must(t, k8s.Create(ctx, sec))

	cp := sent(approved(ns, "cp-1", ichorv1alpha1.RoleControlPlane))
	cp.Spec.Address = "10.0.0.11"
	createMachine(t, cp)

	m := getMachine(t, ns, "cp-1")
	m.Status.Stage = ichorv1alpha1.StageRunning
	must(t, k8s.Status().Update(ctx, m))

	ops := func() []ichorv1alpha1.TalosOperation {
		list := &ichorv1alpha1.TalosOperationList{}
		must(t, k8s.List(ctx, list, client.InNamespace(ns)))

		return list.Items
	}

	out := mustSucceed(t, ichor(t, "cluster", "rotate-ca", "prod", "-n", ns, "--dry-run")).stdout
	for _, want := range []string{"This rotates the CAs of cluster prod", "accepts the new CAs beside the old ones", "wait until you hold credentials",
		"~/.ichor/clusters/prod", "Nothing was changed (--dry-run)."} {
		if !strings.Contains(out, want) {
			t.Fatalf("--dry-run: no %q in:\n%s", want, out)
		}
	}

	admin := userKubeconfig(t, "rotate-admin", "ichor:admin")
	mustFail(t, ichorWith(t, invocation{stdin: "prod\n", env: []string{"KUBECONFIG=" + admin}}, "cluster", "rotate-ca", "prod", "-n", ns),
		"talosclusters/credentials", "kubectl create rolebinding ca-rotation-credentials -n "+ns)
	mustFail(t, ichorWith(t, invocation{stdin: "prd\n"}, "cluster", "rotate-ca", "prod", "-n", ns), "not confirmed", "nothing was changed")

	if n := len(ops()); n != 0 {
		t.Fatalf("refused runs created %d operation(s)", n)
	}

	home := t.TempDir()
	done := make(chan result, 1)

	go func() {
		done <- ichorWith(t, invocation{stdin: "prod\n", env: []string{"ICHOR_HOME=" + home, "ICHOR_PASSPHRASE=correct horse battery staple"}},
			"cluster", "rotate-ca", "prod", "-n", ns, "--timeout", "90s")
	}()

	// The controller's part: the rotation waits for the credentials.
	var op ichorv1alpha1.TalosOperation

	waitFor(t, "the ca-rotation", func() error {
		list := ops()
		if len(list) != 1 {
			return fmt.Errorf("%d operations", len(list))
		}

		op = list[0]

		return nil
	})

	if op.Spec.Type != ichorv1alpha1.OperationCARotation || op.Spec.ClusterName != "prod" || op.Spec.CARotation != nil {
		t.Fatalf("the operation: %+v", op.Spec)
	}

	op.Status.Phase, op.Status.Step = ichorv1alpha1.OperationAwaitingCredentials, "credentials"
	must(t, k8s.Status().Update(ctx, &op))

	next, err := bundle.WithNewCAs(b, time.Now(), "v1.14", bundle.CASet{Talos: true, Kubernetes: true})
	must(t, err)

	var tcr ichorv1alpha1.TalosCredentialRequest

	waitFor(t, "the rotation-credentials request", func() error {
		list := &ichorv1alpha1.TalosCredentialRequestList{}
		must(t, k8s.List(ctx, list, client.InNamespace(ns)))

		if len(list.Items) != 1 || list.Items[0].Spec.Purpose != ichorv1alpha1.PurposeRotationCredentials || list.Items[0].Spec.OperationName != op.Name {
			return fmt.Errorf("requests %+v", list.Items)
		}

		tcr = list.Items[0]

		return nil
	})

	pub, err := credential.ParsePublicKey(tcr.Spec.PublicKey)
	must(t, err)

	cert, err := credential.Sign(next, pub, "os:admin", "test", time.Now(), time.Hour)
	must(t, err)

	kube, _, err := credential.SignKubernetes(next, pub, "test", time.Now(), time.Hour)
	must(t, err)

	exp := metav1.NewTime(cert.NotAfter)
	tcr.Status = ichorv1alpha1.TalosCredentialRequestStatus{
		Role: "os:admin", Certificate: string(cert.PEM), CA: string(next.Certs.OS.Crt) + string(b.Certs.OS.Crt), ExpiresAt: &exp,
		KubernetesCertificate: string(kube), KubernetesCA: string(next.Certs.K8s.Crt) + string(b.Certs.K8s.Crt),
	}
	apimeta.SetStatusCondition(&tcr.Status.Conditions, metav1.Condition{Type: ichorv1alpha1.IssuedCondition, Status: metav1.ConditionTrue, Reason: "Issued", Message: "signed"})
	must(t, k8s.Status().Update(ctx, &tcr))

	// The talosconfig and kubeconfig are stored before the rotation goes on.
	store := filepath.Join(home, "clusters", "prod")

	waitFor(t, "the credentials in the secrets store", func() error {
		s := &secretstore.Store{Cluster: "prod", Dir: store}
		if _, err := s.Read(secretstore.FileKubeconfig, func() (string, error) { return "correct horse battery staple", nil }); err != nil {
			return err
		}

		return nil
	})

	// The rotation ends; the bundle Secret holds the new bundle.
	sec.Data[bundle.DefaultKey], err = bundle.Encode(next)
	must(t, err)
	must(t, k8s.Update(ctx, sec))

	must(t, k8s.Get(ctx, client.ObjectKeyFromObject(&op), &op))
	now := metav1.Now()
	op.Status.Phase, op.Status.Step, op.Status.CompletedAt = ichorv1alpha1.OperationSucceeded, "", &now
	must(t, k8s.Status().Update(ctx, &op))

	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("ichor cluster rotate-ca did not end")
	}

	mustSucceed(t, r)

	if !strings.Contains(r.stdout, "Stored an os:admin talosconfig and an admin kubeconfig of the new CAs") || !strings.Contains(r.stdout, "the new bundle is stored") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}

	s := &secretstore.Store{Cluster: "prod", Dir: store}
	contents, err := s.Load(func() (string, error) { return "correct horse battery staple", nil })
	must(t, err)

	tc, err := clientconfig.FromBytes(contents.Talosconfig)
	must(t, err)

	if ctxc := tc.Contexts[tc.Context]; tc.Context != "prod" || ctxc == nil || strings.Join(ctxc.Endpoints, ",") != "10.0.0.11" {
		t.Fatalf("the stored talosconfig: %q %+v", tc.Context, ctxc)
	}

	kc, err := clientcmd.Load(contents.Kubeconfig)
	must(t, err)

	if cl := kc.Clusters["prod"]; cl == nil || cl.Server != "https://10.0.0.10:6443" || strings.Count(string(cl.CertificateAuthorityData), "BEGIN CERTIFICATE") != 2 {
		t.Fatalf("the stored kubeconfig's cluster: %+v", cl)
	}

	stored, err := bundle.Decode(contents.Bundle, "v1.14")
	must(t, err)

	if string(stored.Certs.OS.Crt) != string(next.Certs.OS.Crt) {
		t.Fatal("the stored bundle is not the one the cluster runs after the rotation")
	}

	// Nothing secret on the terminal.
	if strings.Contains(r.stdout+r.stderr, "PRIVATE KEY") {
		t.Fatal("the command printed a private key")
	}
}

// waitFor polls f for a minute.
func waitFor(t *testing.T, what string, f func() error) {
	t.Helper()

	deadline := time.Now().Add(time.Minute)

	for {
		err := f()
		if err == nil {
			return
		}

		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}

		time.Sleep(100 * time.Millisecond)
	}
}

// `ichor cluster rotate-ca --aggregator-only` rotates the aggregator CA
// alone: no credentials change hands, so the command follows the operation
// to its end without a hand-over and stores the bundle the cluster then
// runs; --etcd is refused with the reason.
func TestRotateCAAggregatorOnly(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "rotate-agg")
	c := newCluster(ns, "prod")
	must(t, k8s.Create(ctx, c))

	b, err := bundle.Generate(secrets.NewClock(), "v1.14")
	must(t, err)

	sec, err := bundle.Secret(ns, c.Spec.SecretsBundleRef, b)
	must(t, err)
	must(t, k8s.Create(ctx, sec))

	mustFail(t, ichorWith(t, invocation{stdin: "prod\n"}, "cluster", "rotate-ca", "prod", "-n", ns, "--etcd"), "does not rotate the etcd CA", "no accepted list")
	mustFail(t, ichor(t, "cluster", "rotate-ca", "prod", "-n", ns, "--aggregator-only", "--talos-only"), "exclude each other")

	out := mustSucceed(t, ichor(t, "cluster", "rotate-ca", "prod", "-n", ns, "--aggregator-only", "--dry-run")).stdout
	if !strings.Contains(out, "make the new aggregator CA") || strings.Contains(out, "credentials of the new CAs") {
		t.Fatalf("--aggregator-only --dry-run: the steps of a rotation of the aggregator CA alone, no hand-over:\n%s", out)
	}

	home := t.TempDir()
	done := make(chan result, 1)

	go func() {
		done <- ichorWith(t, invocation{stdin: "prod\n", env: []string{"ICHOR_HOME=" + home, "ICHOR_PASSPHRASE=correct horse battery staple"}},
			"cluster", "rotate-ca", "prod", "-n", ns, "--aggregator-only", "--timeout", "90s")
	}()

	var op ichorv1alpha1.TalosOperation

	waitFor(t, "the ca-rotation", func() error {
		list := &ichorv1alpha1.TalosOperationList{}
		must(t, k8s.List(ctx, list, client.InNamespace(ns)))

		if len(list.Items) != 1 {
			return fmt.Errorf("%d operations", len(list.Items))
		}

		op = list.Items[0]

		return nil
	})

	if r := op.Spec.CARotation; r == nil || r.Talos == nil || *r.Talos || r.Kubernetes == nil || *r.Kubernetes || !r.Aggregator || r.Etcd {
		t.Fatalf("the operation: %+v", op.Spec.CARotation)
	}

	next, err := bundle.WithNewCAs(b, time.Now(), "v1.14", bundle.CASet{Aggregator: true})
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
		t.Fatal("ichor cluster rotate-ca --aggregator-only did not end")
	}

	mustSucceed(t, r)

	s := &secretstore.Store{Cluster: "prod", Dir: filepath.Join(home, "clusters", "prod")}
	contents, err := s.Load(func() (string, error) { return "correct horse battery staple", nil })
	must(t, err)

	stored, err := bundle.Decode(contents.Bundle, "v1.14")
	must(t, err)

	if string(stored.Certs.K8sAggregator.Crt) != string(next.Certs.K8sAggregator.Crt) || len(contents.Talosconfig) != 0 {
		t.Fatal("the stored bundle is not the one the cluster runs after the rotation, or credentials were stored")
	}

	// An administrator may not read the bundle Secret: picking the finished
	// rotation up says so, and who can store the bundle with which command.
	admin := userKubeconfig(t, "rotate-agg-admin", "ichor:admin")
	mustFail(t, ichorWith(t, invocation{env: []string{"KUBECONFIG=" + admin, "ICHOR_HOME=" + t.TempDir(), "ICHOR_PASSPHRASE=correct horse battery staple"}},
		"cluster", "rotate-ca", "prod", "-n", ns, "--operation", op.Name),
		"the rotation succeeded", "needs `get` on the Secret "+ns+"/prod-secrets", "ichor cluster rotate-ca prod --operation "+op.Name)
}
