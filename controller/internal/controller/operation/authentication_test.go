package operation_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// testIssuer is an OIDC provider on loopback: its discovery document and
// keys over HTTPS (a certificate of its own, for 127.0.0.1), and ES256 ID
// tokens signed with its key.
type testIssuer struct {
	srv *httptest.Server
	key *ecdsa.PrivateKey
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	testenv.Must(t, err)

	iss := &testIssuer{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": iss.srv.URL, "jwks_uri": iss.srv.URL + "/keys", "authorization_endpoint": iss.srv.URL + "/authorize",
			"response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
			"id_token_signing_alg_values_supported": []string{"ES256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})

	iss.srv = httptest.NewTLSServer(mux)
	t.Cleanup(iss.srv.Close)

	return iss
}

// caPEM is the PEM of the issuer's serving certificate, its own CA.
func (i *testIssuer) caPEM() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: i.srv.Certificate().Raw}))
}

// token is an ID token for audience aud naming user sub in groups, signed
// with key (the issuer's, or another to forge one).
func (i *testIssuer) token(t *testing.T, key *ecdsa.PrivateKey, aud, sub string, groups ...string) string {
	t.Helper()

	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	testenv.Must(t, err)

	now := time.Now()
	tok, err := jwt.Signed(sig).Claims(jwt.Claims{
		Issuer: i.srv.URL, Subject: sub, Audience: jwt.Audience{aud},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute)),
	}).Claims(map[string]any{"groups": groups}).Serialize()
	testenv.Must(t, err)

	return tok
}

// whoAmI is the user the cluster's kube-apiserver makes of a bearer token
// (a SelfSubjectReview, which any authenticated user may create).
func whoAmI(t *testing.T, token string) (authenticationv1.UserInfo, error) {
	t.Helper()

	kc, err := adminNode(t, "cp-1").Kubeconfig(context.Background())
	testenv.Must(t, err)

	admin, err := clientcmd.RESTConfigFromKubeConfig(kc)
	testenv.Must(t, err)

	cfg := &rest.Config{Host: admin.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData}}
	k, err := kubernetes.NewForConfig(cfg)
	testenv.Must(t, err)

	r, err := k.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}

	return r.Status.UserInfo, nil
}

// setAuthentication writes spec.authentication and waits until cp-1 says a
// config rollout must restart its kube-apiserver.
func setAuthentication(t *testing.T, a ichorv1alpha1.AuthenticationSpec) {
	t.Helper()

	c := &ichorv1alpha1.TalosCluster{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: clusterName}, c))
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Authentication = a
	testenv.Must(t, k8s.Patch(context.Background(), c, patch))

	testenv.Eventually(t, waitTimeout, "cp-1 waits for a rollout", func() error {
		if !apimeta.IsStatusConditionTrue(getMachine(t, "cp-1").Status.Conditions, ichorv1alpha1.APIServerRestartRequiredCondition) {
			return errors.New("APIServerRestartRequired is not True")
		}

		return nil
	})
}

// TestOperation_AuthenticationRollout: spec.authentication.external is
// rendered into cp-1's KubeAuthenticationConfig, waits for a config
// operation (it restarts the kube-apiserver), and once rolled out the
// cluster's real kube-apiserver accepts the provider's ID tokens as
// `oidc:<sub>` in the groups `oidc:<group>`, and refuses a token of another
// audience or signed with another key. Taking it away again stops the
// provider's tokens.
func TestOperation_AuthenticationRollout(t *testing.T) {
	iss := newTestIssuer(t)

	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	testenv.Must(t, err)

	if _, err := whoAmI(t, iss.token(t, iss.key, "kubernetes", "alice", "devs")); !apierrors.IsUnauthorized(err) {
		t.Fatalf("before spec.authentication the provider's token gives %v, want Unauthorized", err)
	}

	setAuthentication(t, ichorv1alpha1.AuthenticationSpec{External: &ichorv1alpha1.ExternalOIDC{
		IssuerURL: iss.srv.URL, Audiences: []string{"kubernetes"}, GroupsClaim: "groups", CertificateAuthority: iss.caPEM(),
	}})

	testenv.Must(t, k8s.Create(context.Background(), configOp("authn-rollout")))
	op := waitPhase(t, "authn-rollout", ichorv1alpha1.OperationSucceeded)

	if cp := progress(op, "cp-1"); cp.Phase != ichorv1alpha1.MachineDone {
		t.Fatalf("cp-1: %+v", cp)
	}

	// The kube-apiserver fetches the provider's keys when it starts; it
	// answers once it has them.
	var user authenticationv1.UserInfo

	testenv.Eventually(t, waitTimeout, "the provider's token accepted", func() error {
		user, err = whoAmI(t, iss.token(t, iss.key, "kubernetes", "alice", "devs"))

		return err
	})

	if user.Username != "oidc:alice" || !slices.Contains(user.Groups, "oidc:devs") || !slices.Contains(user.Groups, "system:authenticated") {
		t.Fatalf("the provider's user is %+v, want oidc:alice in oidc:devs", user)
	}

	for name, tok := range map[string]string{
		"another audience": iss.token(t, iss.key, "someone-else", "bob"),
		"another key":      iss.token(t, other, "kubernetes", "alice"),
	} {
		if u, err := whoAmI(t, tok); !apierrors.IsUnauthorized(err) {
			t.Errorf("a token with %s: %+v, %v; want Unauthorized", name, u, err)
		}
	}

	// Taken away: rolled out the same way, and the provider's tokens stop.
	setAuthentication(t, ichorv1alpha1.AuthenticationSpec{})
	testenv.Must(t, k8s.Create(context.Background(), configOp("authn-removed")))
	waitPhase(t, "authn-removed", ichorv1alpha1.OperationSucceeded)

	testenv.Eventually(t, waitTimeout, "the provider's token refused", func() error {
		if _, err := whoAmI(t, iss.token(t, iss.key, "kubernetes", "alice")); !apierrors.IsUnauthorized(err) {
			return fmt.Errorf("got %w, want Unauthorized", err)
		}

		return nil
	})
}
