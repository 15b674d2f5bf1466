package kubernetesupgrade_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/controller/internal/testworld"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// beforeKey is where etcd stores the Secret default/before.
const beforeKey = "/registry/secrets/default/before"

// etcdPrefix is the encryption prefix of Secret default/before as cp-1's
// etcd stores it ("" when absent, "plain" when not encrypted).
func etcdPrefix(t testing.TB, ec *emuCluster) string {
	t.Helper()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	v, err := ec.emu(t, "cp-1").EtcdValue(ctx, beforeKey)
	if err != nil || v == nil {
		return ""
	}

	if !bytes.HasPrefix(v, []byte("k8s:enc:")) {
		return "plain"
	}

	parts := strings.SplitN(string(v), ":", 6)
	if len(parts) < 6 {
		return "?"
	}

	return strings.Join(parts[:5], ":")
}

// tokenWorks lists the default namespace's ConfigMaps with a bearer token
// (the service account may not: a 403 means the token authenticated).
func tokenWorks(rc *rest.Config, token string) error {
	c := rest.AnonymousClientConfig(rc)
	c.BearerToken = token

	k, err := kubernetes.NewForConfig(c)
	if err != nil {
		return err
	}

	_, err = k.CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{})
	if err != nil && strings.Contains(err.Error(), "forbidden") {
		return nil
	}

	return err
}

// TestKeyRotation (issue 24): a key-rotation operation in an emulated 3+1
// cluster (three kube-apiservers, each given the keys in turn) rotates the service-account signing key and the secretbox key.
// A Secret written before is read back through the API server in every
// stage of the rotation, and so is one written in each stage; in etcd it
// moves from Talos's key name to the rotation's and back, encrypted with the
// new key at the end (the API server then has the new key alone). A token
// of the old key authenticates until the old key is dropped and not after;
// one of the new key works; a legacy token Secret is signed again with the
// new key (its old token refused, its new one accepted). The bundle Secret ends with the bundle alone,
// its CAs unchanged and both keys new; no machine was rebooted.
func TestKeyRotation(t *testing.T) {
	machines := []string{"cp-1", "cp-2", "cp-3", "w-1"}
	ec := newCluster(t, "127.0.117.0/24", machines)
	ctx := context.Background()
	old := ec.bundle
	rc := ec.restConfig(t)
	k := ec.kube(t)

	reboots := map[string]int{}
	for _, n := range machines {
		reboots[n] = ec.rpcs(t, n, rebootRPC)
	}

	before := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "before"}, StringData: map[string]string{"v": "written-before"}}
	_, err := k.CoreV1().Secrets("default").Create(ctx, before, metav1.CreateOptions{})
	testenv.Must(t, err)

	if p := etcdPrefix(t, ec); p != "k8s:enc:secretbox:v1:key2" {
		t.Fatalf("the Secret is stored with prefix %q before the rotation, want Talos's secretbox key2", p)
	}

	_, err = k.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{})
	testenv.Must(t, err)

	issue := func() string {
		t.Helper()

		exp := int64(3600)
		tr, err := ec.kube(t).CoreV1().ServiceAccounts("default").CreateToken(ctx, "app",
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
		testenv.Must(t, err)

		return tr.Status.Token
	}

	oldToken := issue()
	testenv.Must(t, tokenWorks(rc, oldToken))

	// A legacy token Secret, which the controller-manager fills in.
	_, err = k.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "app-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "app"}},
		Type:       corev1.SecretTypeServiceAccountToken,
	}, metav1.CreateOptions{})
	testenv.Must(t, err)

	legacy := func() (string, error) {
		s, err := ec.kube(t).CoreV1().Secrets("default").Get(ctx, "app-token", metav1.GetOptions{})
		if err != nil {
			return "", err
		}

		if len(s.Data[corev1.ServiceAccountTokenKey]) == 0 {
			return "", fmt.Errorf("the legacy token Secret has no token yet")
		}

		return string(s.Data[corev1.ServiceAccountTokenKey]), nil
	}

	var oldLegacy string

	testenv.Eventually(t, waitTimeout, "the legacy token Secret filled in", func() error {
		var err error
		oldLegacy, err = legacy()

		return err
	})
	testenv.Must(t, tokenWorks(rc, oldLegacy))

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ec.ns, Name: "rotate-keys"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: ec.name, Type: ichorv1alpha1.OperationKeyRotation},
	}
	testenv.Must(t, k8s.Create(ctx, op))

	var (
		failures  []string
		prefixes  []string
		oldTokens = map[string]bool{} // stage → the old token authenticated
		written   = map[string]bool{} // stages a Secret was written in
	)

	testenv.Eventually(t, opTimeout, "the key rotation succeeded", func() error {
		got := ec.getOp(t, op.Name)
		if got.Status.FailedStep != "" {
			t.Fatalf("the rotation paused: %s", got.Status.FailureReason)
		}

		stage := got.Status.Step

		// The cluster's API through the endpoint: the old Secret reads back
		// and a new one is written and read back in each stage.
		if kc, err := kubernetes.NewForConfig(rc); err == nil && !written[stage] {
			if s, err := kc.CoreV1().Secrets("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
				failures = append(failures, fmt.Sprintf("stage %s: reading Secret before: %v", stage, err))
			} else if string(s.Data["v"]) != "written-before" {
				failures = append(failures, fmt.Sprintf("stage %s: Secret before reads %q", stage, s.Data["v"]))
			}

			name := "during-" + stage
			if _, err := kc.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"v": name}},
				metav1.CreateOptions{}); !written[stage] && err == nil {
				written[stage] = true

				if s, err := kc.CoreV1().Secrets("default").Get(ctx, name, metav1.GetOptions{}); err != nil || string(s.Data["v"]) != name {
					failures = append(failures, fmt.Sprintf("stage %s: Secret %s does not read back: %v", stage, name, err))
				}
			}
		}

		if p := etcdPrefix(t, ec); p != "" && !slices.Contains(prefixes, p) {
			prefixes = append(prefixes, p)
		}

		if tokenWorks(rc, oldToken) == nil {
			oldTokens[stage] = true
		}

		if got.Status.Phase != ichorv1alpha1.OperationSucceeded {
			return fmt.Errorf("phase %s, stage %s, stages %+v", got.Status.Phase, stage, got.Status.Stages)
		}

		return nil
	})

	// The API server is restarted in the rollouts: a failed read is a
	// failure only if it is not the restart's (connection refused / EOF).
	for _, f := range failures {
		if !strings.Contains(f, "connection refused") && !strings.Contains(f, "EOF") && !strings.Contains(f, "timeout") &&
			!strings.Contains(f, "the server is currently unable") && !strings.Contains(f, "Timeout") {
			t.Errorf("during the rotation: %s", f)
		}
	}

	if want := []string{"k8s:enc:secretbox:v1:key2", "k8s:enc:secretbox:v1:ichor-rotating"}; !slices.Equal(prefixes[:min(2, len(prefixes))], want) {
		t.Errorf("the Secret written before was stored with prefixes %v, want %v and key2 again", prefixes, want)
	}

	if p := etcdPrefix(t, ec); p != "k8s:enc:secretbox:v1:key2" {
		t.Errorf("the Secret is stored with prefix %q after the rotation, want key2", p)
	}

	// The old token worked while the old key verified, and stopped after.
	if !oldTokens["prepare"] && !oldTokens["accept"] && !oldTokens["issue"] {
		t.Errorf("the old token never authenticated before the drop: %v", oldTokens)
	}

	testenv.Eventually(t, waitTimeout, "the old token refused, a new one accepted", func() error {
		if err := tokenWorks(rc, oldToken); err == nil {
			return fmt.Errorf("the token of the old key still authenticates")
		}

		if err := tokenWorks(rc, oldLegacy); err == nil {
			return fmt.Errorf("the legacy token of the old key still authenticates")
		}

		if err := tokenWorks(rc, issue()); err != nil {
			return err
		}

		// The legacy token Secret was signed again, with the new key.
		tok, err := legacy()
		if err != nil {
			return err
		}

		if tok == oldLegacy {
			return fmt.Errorf("the legacy token Secret still holds the token of the old key")
		}

		return tokenWorks(rc, tok)
	})

	// The bundle Secret holds the new bundle alone: the same CAs, new keys.
	sec := &corev1.Secret{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ec.ns, Name: ec.cluster(t).Spec.SecretsBundleRef.Name}, sec))

	if len(sec.Data) != 1 {
		t.Fatalf("the bundle Secret holds %d keys after the rotation, want the bundle alone", len(sec.Data))
	}

	rotated, err := bundle.LoadForCluster(sec, ec.cluster(t))
	testenv.Must(t, err)

	if string(rotated.Certs.K8sServiceAccount.Key) == string(old.Certs.K8sServiceAccount.Key) ||
		rotated.Secrets.SecretboxEncryptionSecret == old.Secrets.SecretboxEncryptionSecret ||
		string(rotated.Certs.OS.Crt) != string(old.Certs.OS.Crt) || string(rotated.Certs.K8s.Crt) != string(old.Certs.K8s.Crt) {
		t.Fatal("the bundle after the rotation: the service-account key and the secretbox secret must be new, the CAs the same")
	}

	// The API server, whose configuration now has the new secretbox key
	// alone, reads the old Secret: it is encrypted with the new key.
	ec.bundle = rotated

	s, err := ec.kube(t).CoreV1().Secrets("default").Get(ctx, "before", metav1.GetOptions{})
	testenv.Must(t, err)

	if string(s.Data["v"]) != "written-before" {
		t.Errorf("Secret before reads %q after the rotation", s.Data["v"])
	}

	for _, n := range machines {
		if d := ec.rpcs(t, n, rebootRPC) - reboots[n]; d != 0 {
			t.Errorf("%s was rebooted %d times", n, d)
		}
	}
}

// TestKeyRotationChaos: with the controller killed after every reconcile
// (each reconcile a new controller process), a key rotation still goes
// through every stage once, applies each rollout stage's configuration once
// to the control plane and never to the worker (whose configuration holds
// no key), and ends with the bundle alone in the Secret, both keys new, and
// the Secrets readable.
func TestKeyRotationChaos(t *testing.T) {
	machines := []string{"cp-1", "w-1"}
	ec := newCluster(t, "127.0.118.0/24", machines)
	ctx := context.Background()

	stopOperations()
	t.Cleanup(func() { testenv.Must(t, startOperations(context.Background())) })

	old := ec.bundle

	_, err := ec.kube(t).CoreV1().Secrets("default").Create(ctx,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "before"}, StringData: map[string]string{"v": "written-before"}}, metav1.CreateOptions{})
	testenv.Must(t, err)

	before := map[string]int{}
	for _, n := range machines {
		before[n] = ec.rpcs(t, n, applyRPC)
	}

	op := &ichorv1alpha1.TalosOperation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ec.ns, Name: "rotate-keys-chaos"},
		Spec:       ichorv1alpha1.TalosOperationSpec{ClusterName: ec.name, Type: ichorv1alpha1.OperationKeyRotation},
	}
	testenv.Must(t, k8s.Create(ctx, op))

	chaos := testworld.RunChaos(t, opTimeout, func() ctrl.Result { return reconcileOnceInFreshController(t, ec.ns, op.Name) },
		func() testworld.ChaosStep { return testworld.OperationStep(ec.getOp(t, op.Name), nil) })
	stages := chaos.Steps[""]

	if want := []string{"prepare", "accept", "promote", "issue", "rewrite", "tokens", "retire", "drop", "rename", "apply-name", "reencrypt", "finish", "cleanup"}; !slices.Equal(stages, want) {
		t.Errorf("stages %v, want %v once each, in order", stages, want)
	}

	// Five stages change the control plane's configuration: one apply each
	// (an ApplyConfiguration dry run and the apply), whatever the restarts.
	if d := ec.rpcs(t, "cp-1", applyRPC) - before["cp-1"]; d != 5*2 {
		t.Errorf("cp-1 got %d ApplyConfiguration calls across the restarts, want 10 (five applies)", d)
	}

	if d := ec.rpcs(t, "w-1", applyRPC) - before["w-1"]; d != 0 {
		t.Errorf("w-1 got %d ApplyConfiguration calls, want none (its configuration holds no key)", d)
	}

	sec := &corev1.Secret{}
	testenv.Must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ec.ns, Name: ec.cluster(t).Spec.SecretsBundleRef.Name}, sec))

	rotated, err := bundle.LoadForCluster(sec, ec.cluster(t))
	testenv.Must(t, err)

	if len(sec.Data) != 1 || rotated.Secrets.SecretboxEncryptionSecret == old.Secrets.SecretboxEncryptionSecret ||
		string(rotated.Certs.K8sServiceAccount.Key) == string(old.Certs.K8sServiceAccount.Key) {
		t.Fatalf("the bundle Secret after the rotation holds %d keys (want the bundle alone) and new keys", len(sec.Data))
	}

	ec.bundle = rotated

	testenv.Eventually(t, waitTimeout, "the Secret written before read back", func() error {
		s, err := ec.kube(t).CoreV1().Secrets("default").Get(ctx, "before", metav1.GetOptions{})
		if err != nil {
			return err
		}

		if string(s.Data["v"]) != "written-before" {
			t.Fatalf("Secret before reads %q", s.Data["v"])
		}

		return nil
	})

	if p := etcdPrefix(t, ec); p != "k8s:enc:secretbox:v1:key2" {
		t.Errorf("the Secret is stored with prefix %q after the rotation, want key2", p)
	}
}
