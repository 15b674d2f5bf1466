package kubernetesupgrade_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The Talos calls that would mean a machine was upgraded or rebooted.
const (
	upgradeRPC = "/machine.LifecycleService/Upgrade"
	rebootRPC  = "/machine.MachineService/Reboot"
)

// talosCreds is a Talos client identity: a certificate and the CAs trusted.
type talosCreds struct {
	cert  tls.Certificate
	roots *stdx509.CertPool
}

func talosCredsOf(t testing.TB, b *secrets.Bundle, trust ...[]byte) talosCreds {
	t.Helper()

	p, err := b.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Admin), time.Hour)
	testenv.Must(t, err)

	cert, err := tls.X509KeyPair(p.Crt, p.Key)
	testenv.Must(t, err)

	roots := stdx509.NewCertPool()
	for _, c := range trust {
		roots.AppendCertsFromPEM(c)
	}

	return talosCreds{cert, roots}
}

// works reads the Talos version of machine n of ec with c.
func (c talosCreds) works(t testing.TB, ec *emuCluster, n string) error {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	cl, err := talos.DialWithCertificate(ctx, ec.emu(t, n).IP(), 0, c.cert, c.roots)
	if err != nil {
		return err
	}

	defer cl.Close() //nolint:errcheck

	_, err = cl.Version(ctx)

	return err
}

// kubeWorks lists the Nodes with rc.
func kubeWorks(rc *rest.Config) error {
	k, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}

	_, err = k.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})

	return err
}

// TestCARotation (issue 24): a ca-rotation operation in the emulated 3+2
// cluster rotates the Talos API CA and the Kubernetes CA in Talos's stages.
// The operator's old talosconfig and kubeconfig work until the old CAs are
// dropped and fail after; the credentials handed over while the operation
// waits in AwaitingCredentials (a rotation-credentials
// TalosCredentialRequest, signed by the controller) work from then on; at
// the end every node presents a certificate of the new Talos API CA, the
// bundle Secret holds the new bundle alone, every Node is Ready, and no
// machine was rebooted or upgraded (every stage is applied live).
func TestCARotation(t *testing.T) {
	machines := []string{"cp-1", "cp-2", "cp-3", "w-1", "w-2"}
	ec := newCluster(t, "127.0.115.0/24", machines)

	ctx := context.Background()
	old := ec.bundle
	before := map[string][2]int{}

	for _, n := range machines {
		before[n] = [2]int{ec.rpcs(t, n, upgradeRPC), ec.rpcs(t, n, rebootRPC)}
	}

	oldTalos := talosCredsOf(t, old, old.Certs.OS.Crt)
	oldKube := ec.restConfig(t)

	for _, n := range machines {
		testenv.Must(t, oldTalos.works(t, ec, n))
	}

	testenv.Must(t, kubeWorks(oldKube))

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ec.ns, Name: "rotate-ca"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: ec.name, Type: ichorv1alpha1.OperationCARotation},
	}
	testenv.Must(t, k8s.Create(ctx, op))

	// Every node accepts the new CAs; nothing presents them yet, so the old
	// credentials still work and the operation waits for the hand-over.
	var got *ichorv1alpha1.TalosOperation

	testenv.Eventually(t, opTimeout, "the rotation awaiting the credentials", func() error {
		got = ec.getOp(t, op.Name)
		if got.Status.FailedStep != "" {
			t.Fatalf("the rotation paused: %s", got.Status.FailureReason)
		}

		if got.Status.Phase != ichorv1alpha1.OperationAwaitingCredentials {
			return fmt.Errorf("phase %q, step %q, stages %+v, machines %+v", got.Status.Phase, got.Status.Step, got.Status.Stages, got.Status.Machines)
		}

		return nil
	})

	if c := apimeta.FindStatusCondition(got.Status.Conditions, ichorv1alpha1.ReadyCondition); c == nil || c.Reason != ichorv1alpha1.AwaitingCredentialsReason ||
		!strings.Contains(c.Message, "ichor cluster rotate-ca "+ec.name+" --operation rotate-ca") {
		t.Fatalf("Ready while awaiting the credentials: %+v", c)
	}

	for _, n := range machines {
		if err := oldTalos.works(t, ec, n); err != nil {
			t.Fatalf("the old talosconfig fails on %s before the servers switch: %v", n, err)
		}
	}

	testenv.Must(t, kubeWorks(oldKube))

	// Still waiting a while later: nothing but the hand-over moves it on.
	time.Sleep(2 * time.Second)

	if p := ec.getOp(t, op.Name).Status.Phase; p != ichorv1alpha1.OperationAwaitingCredentials {
		t.Fatalf("the rotation went on without the hand-over: phase %s", p)
	}

	newTalos, newKube := handOver(t, ec, op.Name)

	// From the hand-over on, the new talosconfig works on every node at
	// every look (apid never restarts), until the operation completes.
	var talosFailures []string

	testenv.Eventually(t, opTimeout, "the CA rotation succeeded", func() error {
		for _, n := range machines {
			if err := newTalos.works(t, ec, n); err != nil {
				talosFailures = append(talosFailures, fmt.Sprintf("%s at stage %s: %v", n, ec.getOp(t, op.Name).Status.Step, err))
			}
		}

		got := ec.getOp(t, op.Name)
		if got.Status.FailedStep != "" {
			t.Fatalf("the rotation paused: %s", got.Status.FailureReason)
		}

		if got.Status.Phase != ichorv1alpha1.OperationSucceeded {
			return fmt.Errorf("phase %s, stage %s, stages %+v", got.Status.Phase, got.Status.Step, got.Status.Stages)
		}

		return nil
	})

	if len(talosFailures) > 0 {
		t.Errorf("the new talosconfig failed during the rotation: %v", talosFailures)
	}

	// The bundle Secret holds the new bundle alone.
	sec := &corev1.Secret{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ec.ns, Name: ec.cluster(t).Spec.SecretsBundleRef.Name}, sec))

	if len(sec.Data) != 1 {
		keys := make([]string, 0, len(sec.Data))
		for k := range sec.Data {
			keys = append(keys, k)
		}

		t.Fatalf("the bundle Secret holds %v after the rotation, want the bundle alone", keys)
	}

	rotated, err := bundle.LoadForCluster(sec, ec.cluster(t))
	testenv.Must(t, err)

	if string(rotated.Certs.OS.Crt) == string(old.Certs.OS.Crt) || string(rotated.Certs.K8s.Crt) == string(old.Certs.K8s.Crt) ||
		rotated.Cluster.ID != old.Cluster.ID || string(rotated.Certs.Etcd.Crt) != string(old.Certs.Etcd.Crt) {
		t.Fatal("the bundle after the rotation: the Talos API and Kubernetes CAs must be new, the cluster ID and the etcd CA the same")
	}

	ec.bundle = rotated

	// Every node presents a certificate of the new Talos API CA alone, and
	// lets the new talosconfig in; the old one is refused everywhere.
	onlyNew := talosCredsOf(t, rotated, rotated.Certs.OS.Crt)
	for _, n := range machines {
		if err := onlyNew.works(t, ec, n); err != nil {
			t.Errorf("%s: a client trusting the new Talos API CA alone: %v", n, err)
		}

		if err := oldTalos.works(t, ec, n); err == nil {
			t.Errorf("%s still lets the old talosconfig in", n)
		}

		if err := newTalos.works(t, ec, n); err != nil {
			t.Errorf("%s: the handed-over talosconfig: %v", n, err)
		}
	}

	// The new kubeconfig works; the old one is refused (once the API server
	// has settled after its last restart).
	testenv.Eventually(t, waitTimeout, "the new kubeconfig in, the old one out", func() error {
		if err := kubeWorks(newKube); err != nil {
			return fmt.Errorf("the handed-over kubeconfig: %w", err)
		}

		if err := kubeWorks(oldKube); err == nil {
			return fmt.Errorf("the old kubeconfig still works")
		}

		return nil
	})

	// Every Node is Ready, seen with the new kubeconfig.
	testenv.Eventually(t, waitTimeout, "every Node Ready after the rotation", func() error {
		k, err := kubernetes.NewForConfig(newKube)
		if err != nil {
			return err
		}

		nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}

		ready := 0

		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}

		if ready != len(machines) {
			return fmt.Errorf("%d of %d Nodes Ready", ready, len(machines))
		}

		return nil
	})

	for _, n := range machines {
		if after := [2]int{ec.rpcs(t, n, upgradeRPC), ec.rpcs(t, n, rebootRPC)}; after != before[n] {
			t.Errorf("%s got Upgrade/Reboot calls during the rotation: %v → %v", n, before[n], after)
		}
	}

	// Each stage is in status, done.
	got = ec.getOp(t, op.Name)
	for _, st := range got.Status.Stages {
		if st.Phase != ichorv1alpha1.StageDone {
			t.Errorf("stage %s is %s", st.Name, st.Phase)
		}
	}
}

// handOver asks for the credentials of a CA rotation awaiting them, as
// `ichor cluster rotate-ca` does: a rotation-credentials
// TalosCredentialRequest with the operator's public key, which the
// controller signs with the new CAs (trusting the old and the new). It
// returns the talosconfig and kubeconfig identities made of the answer.
func handOver(t *testing.T, ec *emuCluster, opName string) (talosCreds, *rest.Config) {
	t.Helper()

	ctx := context.Background()

	// The hand-over: the controller signs the operator's public key with the new CAs.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	testenv.Must(t, err)

	der, err := stdx509.MarshalPKIXPublicKey(&key.PublicKey)
	testenv.Must(t, err)

	keyDER, err := stdx509.MarshalECPrivateKey(key)
	testenv.Must(t, err)

	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})

	tcr := &ichorv1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ec.ns, Name: opName + "-credentials"},
		Spec: ichorv1alpha1.TalosCredentialRequestSpec{
			ClusterName: ec.name, Purpose: ichorv1alpha1.PurposeRotationCredentials, OperationName: opName,
			PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})),
		},
	}
	testenv.Must(t, k8s.Create(ctx, tcr))

	testenv.Eventually(t, waitTimeout, "the rotation credentials issued", func() error {
		testenv.Must(t, k8s.Get(ctx, client.ObjectKeyFromObject(tcr), tcr))

		if !apimeta.IsStatusConditionTrue(tcr.Status.Conditions, ichorv1alpha1.IssuedCondition) {
			return fmt.Errorf("conditions %+v", tcr.Status.Conditions)
		}

		return nil
	})

	if tcr.Status.Role != string(role.Admin) || tcr.Status.KubernetesCertificate == "" || strings.Count(tcr.Status.CA, "BEGIN CERTIFICATE") != 2 ||
		strings.Count(tcr.Status.KubernetesCA, "BEGIN CERTIFICATE") != 2 {
		t.Fatalf("the rotation credentials: role %q, a Kubernetes certificate %t, %d Talos and %d Kubernetes CAs to trust (want the old and the new)",
			tcr.Status.Role, tcr.Status.KubernetesCertificate != "", strings.Count(tcr.Status.CA, "BEGIN CERTIFICATE"), strings.Count(tcr.Status.KubernetesCA, "BEGIN CERTIFICATE"))
	}

	pair, err := tls.X509KeyPair([]byte(tcr.Status.Certificate), keyPEM)
	testenv.Must(t, err)

	newRoots := stdx509.NewCertPool()
	newRoots.AppendCertsFromPEM([]byte(tcr.Status.CA))
	newTalos := talosCreds{pair, newRoots}

	endpoint, err := render.Endpoint(ec.cluster(t).Spec.Endpoint)
	testenv.Must(t, err)

	newKube := &rest.Config{
		Host:            endpoint,
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte(tcr.Status.KubernetesCA), CertData: []byte(tcr.Status.KubernetesCertificate), KeyData: keyPEM},
		Timeout:         15 * time.Second,
	}

	return newTalos, newKube
}

// frontProxyWorks lists the Namespaces at endpoint as the aggregation
// layer's front proxy does: a client certificate of ca named
// front-proxy-client and the user in X-Remote-User. The kube-apiserver
// takes the user from the header only from a client its
// requestheader-client-ca-file accepts.
func frontProxyWorks(endpoint string, ca *x509.PEMEncodedCertificateAndKey, trust []byte) error {
	authority, err := x509.NewCertificateAuthorityFromCertificateAndKey(ca)
	if err != nil {
		return err
	}

	pair, err := x509.NewKeyPair(authority, x509.CommonName("front-proxy-client"),
		x509.NotAfter(time.Now().Add(10*time.Minute)), x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}))
	if err != nil {
		return err
	}

	rc := &rest.Config{
		Host:            endpoint,
		TLSClientConfig: rest.TLSClientConfig{CAData: trust, CertData: pair.CrtPEM, KeyData: pair.KeyPEM},
		Timeout:         10 * time.Second,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				req = req.Clone(req.Context())
				req.Header.Set("X-Remote-User", "front-proxy-test")
				req.Header.Set("X-Remote-Group", "system:masters")

				return rt.RoundTrip(req)
			})
		},
	}

	return kubeWorks(rc)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestCARotationChaos: with the controller killed after every reconcile
// (each reconcile a new controller process), a CA rotation of the Talos API,
// Kubernetes and aggregator CAs still goes through every stage once, waits
// for the hand-over, applies each stage's configuration at most once per
// machine and stage, and ends with the new CAs alone: an old talosconfig
// refused, the front proxy of the new aggregator CA let in and the old one
// not, the new bundle alone in the Secret.
func TestCARotationChaos(t *testing.T) {
	machines := []string{"cp-1", "w-1"}
	ec := newCluster(t, "127.0.116.0/24", machines)
	ctx := context.Background()

	stopOperations()
	t.Cleanup(func() { testenv.Must(t, startOperations(context.Background())) })

	old := ec.bundle
	oldTalos := talosCredsOf(t, old, old.Certs.OS.Crt)

	endpoint, err := render.Endpoint(ec.cluster(t).Spec.Endpoint)
	testenv.Must(t, err)

	// The front proxy of the aggregator CA gets in before the rotation.
	testenv.Must(t, frontProxyWorks(endpoint, old.Certs.K8sAggregator, old.Certs.K8s.Crt))

	before := map[string]int{}
	for _, n := range machines {
		before[n] = ec.rpcs(t, n, applyRPC)
	}

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ec.ns, Name: "rotate-ca-chaos"},
		Spec: ichorv1alpha1.TalosOperationSpec{
			ClusterName: ec.name, Type: ichorv1alpha1.OperationCARotation, CARotation: &ichorv1alpha1.CARotation{Aggregator: true},
		},
	}
	testenv.Must(t, k8s.Create(ctx, op))

	handedOver := false
	chaos := testworld.RunChaos(t, opTimeout, func() ctrl.Result { return reconcileOnceInFreshController(t, ec.ns, op.Name) },
		func() testworld.ChaosStep {
			got := ec.getOp(t, op.Name)
			if got.Status.Phase == ichorv1alpha1.OperationAwaitingCredentials && !handedOver {
				// The hand-over, as `ichor cluster rotate-ca` asks for it.
				key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
				testenv.Must(t, err)

				der, err := stdx509.MarshalPKIXPublicKey(&key.PublicKey)
				testenv.Must(t, err)

				testenv.Must(t, k8s.Create(ctx, &ichorv1alpha1.TalosCredentialRequest{
					ObjectMeta: metav1.ObjectMeta{Namespace: ec.ns, Name: "rotate-ca-chaos-credentials"},
					Spec: ichorv1alpha1.TalosCredentialRequestSpec{
						ClusterName: ec.name, Purpose: ichorv1alpha1.PurposeRotationCredentials, OperationName: op.Name,
						PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})),
					},
				}))

				handedOver = true
			}

			return testworld.OperationStep(got, nil)
		})
	stages := chaos.Steps[""]

	if want := []string{"prepare", "accept", "credentials", "issue", "root-ca", "drop", "restart-clients", "finish"}; !slices.Equal(stages, want) {
		t.Errorf("stages %v, want %v once each, in order", stages, want)
	}

	// Three stages change each machine's configuration (accept, issue,
	// drop): one apply each, whatever the restarts, each an
	// ApplyConfiguration dry run (for the node's warnings) and the apply.
	for _, n := range machines {
		if d := ec.rpcs(t, n, applyRPC) - before[n]; d != 3*2 {
			t.Errorf("%s got %d ApplyConfiguration calls across the restarts, want 6 (three applies)", n, d)
		}

		if err := oldTalos.works(t, ec, n); err == nil {
			t.Errorf("%s still lets the old talosconfig in", n)
		}
	}

	sec := &corev1.Secret{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ec.ns, Name: ec.cluster(t).Spec.SecretsBundleRef.Name}, sec))

	rotated, err := bundle.LoadForCluster(sec, ec.cluster(t))
	testenv.Must(t, err)

	if len(sec.Data) != 1 || string(rotated.Certs.OS.Crt) == string(old.Certs.OS.Crt) || string(rotated.Certs.K8sAggregator.Crt) == string(old.Certs.K8sAggregator.Crt) {
		t.Fatalf("the bundle Secret after the rotation holds %d keys (want the bundle alone), the new Talos API CA: %t, the new aggregator CA: %t",
			len(sec.Data), string(rotated.Certs.OS.Crt) != string(old.Certs.OS.Crt), string(rotated.Certs.K8sAggregator.Crt) != string(old.Certs.K8sAggregator.Crt))
	}

	testenv.Eventually(t, waitTimeout, "the new aggregator CA's front proxy in, the old one's out", func() error {
		if err := frontProxyWorks(endpoint, rotated.Certs.K8sAggregator, rotated.Certs.K8s.Crt); err != nil {
			return fmt.Errorf("the new aggregator CA: %w", err)
		}

		if err := frontProxyWorks(endpoint, old.Certs.K8sAggregator, rotated.Certs.K8s.Crt); err == nil {
			return fmt.Errorf("the old aggregator CA's front proxy still gets in")
		}

		return nil
	})
}
