package download

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	stdx509 "crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"time"

	"github.com/siderolabs/crypto/x509"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// TalosconfigReader is the os:reader talosconfig a person downloads for a
// cluster (`ichor cluster talosconfig`, the console's Download talosconfig):
// needs `download` on talosclusters/talosconfig-reader.
const TalosconfigReader = ichorv1alpha1.PurposeTalosconfigReader

// Lifetimes of a reader talosconfig: one hour unless asked, twelve at most
// (the webhook refuses more; guard.MaxCredentialDuration).
var (
	DefaultTalosconfigDuration = time.Hour
	MaxTalosconfigDuration     = guard.MaxCredentialDuration[ichorv1alpha1.PurposeTalosconfigReader]
)

// ValidTalosconfigDuration checks a requested lifetime; zero is the default.
func ValidTalosconfigDuration(d time.Duration) (time.Duration, error) {
	switch {
	case d == 0:
		return DefaultTalosconfigDuration, nil
	case d < time.Minute || d > MaxTalosconfigDuration:
		return 0, fmt.Errorf("a reader talosconfig lasts 1m to %s, not %s: ask for less (the default is %s)",
			shortDuration(MaxTalosconfigDuration), d, shortDuration(DefaultTalosconfigDuration))
	}

	return d, nil
}

func shortDuration(d time.Duration) string {
	if d%time.Hour == 0 {
		return strconv.Itoa(int(d/time.Hour)) + "h"
	}

	return d.String()
}

// TalosconfigKey is the key pair of a reader talosconfig: made where the
// talosconfig is written, its public half sent in the request.
type TalosconfigKey struct {
	key *ecdsa.PrivateKey
	// PublicPEM is the PEM "PUBLIC KEY" for spec.publicKey.
	PublicPEM string
}

// NewTalosconfigKey makes a P-256 key pair.
func NewTalosconfigKey() (*TalosconfigKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("making a key pair: %w", err)
	}

	der, err := stdx509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("encoding the public key: %w", err)
	}

	return &TalosconfigKey{key: k, PublicPEM: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))}, nil
}

// TalosconfigRequest is the TalosCredentialRequest of a reader talosconfig.
func TalosconfigRequest(namespace, cluster, generateName string, k *TalosconfigKey, d time.Duration) *ichorv1alpha1.TalosCredentialRequest {
	return &ichorv1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: generateName},
		Spec: ichorv1alpha1.TalosCredentialRequestSpec{
			ClusterName: cluster, Purpose: TalosconfigReader, PublicKey: k.PublicPEM,
			Duration: &metav1.Duration{Duration: d},
		},
	}
}

// ErrDenied wraps the controller's refusal of a request.
var ErrDenied = errors.New("the controller denied the credential request")

// Answered reports whether the controller answered the request: signed
// (nil error) or denied (an error wrapping ErrDenied with its message).
func Answered(tcr *ichorv1alpha1.TalosCredentialRequest) (bool, error) {
	if apimeta.IsStatusConditionTrue(tcr.Status.Conditions, ichorv1alpha1.IssuedCondition) && tcr.Status.Certificate != "" {
		return true, nil
	}

	if d := apimeta.FindStatusCondition(tcr.Status.Conditions, ichorv1alpha1.DeniedCondition); d != nil && d.Status == metav1.ConditionTrue {
		return true, fmt.Errorf("%w (TalosCredentialRequest %s): %s", ErrDenied, tcr.Name, d.Message)
	}

	return false, nil
}

// Talosconfig is the talosconfig of an answered request: context cluster,
// the endpoints given, the request's CA and certificate with the key's
// private half. It is a credential: written 0600, never logged.
func (k *TalosconfigKey) Talosconfig(cluster string, endpoints []string, tcr *ichorv1alpha1.TalosCredentialRequest) ([]byte, error) {
	der, err := stdx509.MarshalECPrivateKey(k.key)
	if err != nil {
		return nil, fmt.Errorf("encoding the private key: %w", err)
	}

	crt := &x509.PEMEncodedCertificateAndKey{
		Crt: []byte(tcr.Status.Certificate),
		Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}),
	}

	// The certificate must be the key's: a mismatch is a bug, not a file to hand out.
	if _, err := tls.X509KeyPair(crt.Crt, crt.Key); err != nil {
		return nil, fmt.Errorf("the certificate of TalosCredentialRequest %s does not match the key made for it: %w", tcr.Name, err)
	}

	if roots := stdx509.NewCertPool(); !roots.AppendCertsFromPEM([]byte(tcr.Status.CA)) {
		return nil, fmt.Errorf("the CA of TalosCredentialRequest %s does not parse", tcr.Name)
	}

	return clientconfig.NewConfig(cluster, endpoints, []byte(tcr.Status.CA), crt).Bytes()
}

// TalosconfigEndpoints are the Talos API endpoints of the cluster's running
// control planes, sorted; port is the nodes' Talos API port (0 or 50000
// leaves the address bare, as talosctl defaults to 50000).
func TalosconfigEndpoints(machines []ichorv1alpha1.TalosMachine, cluster string, port int) []string {
	var out []string

	for i := range machines {
		m := &machines[i]
		if m.Spec.ClusterName != cluster || m.Spec.Role != ichorv1alpha1.RoleControlPlane ||
			m.Status.Stage != ichorv1alpha1.StageRunning || m.Spec.Address == "" || m.DeletionTimestamp != nil {
			continue
		}

		ep := m.Spec.Address
		if port != 0 && port != constants.ApidPort {
			ep = net.JoinHostPort(ep, strconv.Itoa(port))
		}

		out = append(out, ep)
	}

	sort.Strings(out)

	return out
}

// TalosconfigEventMessage is the text of the Warning Event the controller
// leaves on the TalosCluster when it signs a reader talosconfig: who, which
// cluster, until when.
func TalosconfigEventMessage(user, cluster string, expires time.Time) string {
	return fmt.Sprintf("%s downloads an os:reader talosconfig of cluster %s, valid until %s",
		user, cluster, expires.UTC().Format(time.RFC3339))
}

// RotationRequest is the TalosCredentialRequest of a CA rotation's
// credentials (an os:admin talosconfig and an admin kubeconfig of the new
// CAs), for operation, lasting the purpose's default (a year).
func RotationRequest(namespace, cluster, operation string, k *TalosconfigKey) *ichorv1alpha1.TalosCredentialRequest {
	return &ichorv1alpha1.TalosCredentialRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: operation + "-credentials-"},
		Spec: ichorv1alpha1.TalosCredentialRequestSpec{
			ClusterName: cluster, Purpose: ichorv1alpha1.PurposeRotationCredentials, PublicKey: k.PublicPEM, OperationName: operation,
		},
	}
}

// Kubeconfig is the admin kubeconfig of an answered rotation-credentials
// request: the cluster's API server at server, the request's Kubernetes CAs
// and certificate with the key's private half. It is a credential: written
// 0600, never logged.
func (k *TalosconfigKey) Kubeconfig(cluster, server string, tcr *ichorv1alpha1.TalosCredentialRequest) ([]byte, error) {
	der, err := stdx509.MarshalECPrivateKey(k.key)
	if err != nil {
		return nil, fmt.Errorf("encoding the private key: %w", err)
	}

	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})

	if _, err := tls.X509KeyPair([]byte(tcr.Status.KubernetesCertificate), keyPEM); err != nil {
		return nil, fmt.Errorf("the Kubernetes certificate of TalosCredentialRequest %s does not match the key made for it: %w", tcr.Name, err)
	}

	if roots := stdx509.NewCertPool(); !roots.AppendCertsFromPEM([]byte(tcr.Status.KubernetesCA)) {
		return nil, fmt.Errorf("the Kubernetes CA of TalosCredentialRequest %s does not parse", tcr.Name)
	}

	user := "admin@" + cluster
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: []byte(tcr.Status.KubernetesCA)}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: []byte(tcr.Status.KubernetesCertificate), ClientKeyData: keyPEM}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = user

	return clientcmd.Write(*cfg)
}
