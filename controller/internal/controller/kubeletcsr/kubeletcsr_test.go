package kubeletcsr_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/controller/kubeletcsr"
	"github.com/maeshinshin/ichor/tools/testenv"
)

var serving = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth}

// csrPEM is a certificate request for subject cn/org with the given names.
func csrPEM(t testing.TB, cn, org string, dns []string, ips []net.IP) []byte {
	t.Helper()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	testenv.Must(t, err)

	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn, Organization: []string{org}}, DNSNames: dns, IPAddresses: ips,
	}, key)
	testenv.Must(t, err)

	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// TestCheck: only the node's own subject, names, addresses and server-auth usage pass.
func TestCheck(t *testing.T) {
	node := "cp-1"
	names := []string{"cp-1"}
	addrs := []netip.Addr{netip.MustParseAddr("10.0.0.5")}
	own := []net.IP{net.ParseIP("10.0.0.5")}

	cases := []struct {
		name   string
		req    []byte
		usages []certificatesv1.KeyUsage
		want   string // "" = approved; else a substring of the reason
	}{
		{"own names and address", csrPEM(t, "system:node:cp-1", "system:nodes", names, own), serving, ""},
		{"another node's subject", csrPEM(t, "system:node:cp-2", "system:nodes", names, own), serving, "not CN=system:node:cp-1"},
		{"not in system:nodes", csrPEM(t, "system:node:cp-1", "system:masters", names, own), serving, "not CN=system:node:cp-1"},
		{"a foreign DNS name", csrPEM(t, "system:node:cp-1", "system:nodes", []string{"cp-1", "kubernetes.default"}, own), serving, `"kubernetes.default" is not one of`},
		{"a foreign address", csrPEM(t, "system:node:cp-1", "system:nodes", names, []net.IP{net.ParseIP("10.0.0.6")}), serving, "10.0.0.6 is not one of"},
		{"client auth", csrPEM(t, "system:node:cp-1", "system:nodes", names, own), append(serving, certificatesv1.UsageClientAuth), `usage "client auth"`},
		{"no server auth", csrPEM(t, "system:node:cp-1", "system:nodes", names, own), serving[:2], "does not ask for server auth"},
		{"no names", csrPEM(t, "system:node:cp-1", "system:nodes", nil, nil), serving, "names no DNS name or IP address"},
		{"not PEM", []byte("junk"), serving, "not a PEM certificate request"},
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := kubeletcsr.Check(&certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{Request: c.req, Usages: c.usages}}, node, names, addrs)

			switch {
			case c.want == "" && got != "":
				t.Errorf("refused: %s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Errorf("reason %q, want it to contain %q", got, c.want)
			}
		})
	}
}

// TestApprover: in the emulated cluster, the node's own serving request is
// approved; one naming a foreign DNS name, and one not made by a node, are
// denied with the reason; a client-certificate request is left alone.
func TestApprover(t *testing.T) {
	ctx := context.Background()
	em, err := world.Machine("cp-1")
	testenv.Must(t, err)

	admin := adminClient(t, em.IP())
	nodeClient := asNode(t, em.IP(), "cp-1")

	create := func(k kubernetes.Interface, name, signer string, req []byte, usages []certificatesv1.KeyUsage) {
		t.Helper()

		testenv.Eventually(t, waitTimeout, "create CSR "+name, func() error {
			_, err := k.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       certificatesv1.CertificateSigningRequestSpec{SignerName: signer, Request: req, Usages: usages},
			}, metav1.CreateOptions{})

			return err
		})
	}

	ip := []net.IP{net.ParseIP(em.IP())}

	create(nodeClient, "own", kubeletcsr.Signer, csrPEM(t, "system:node:cp-1", "system:nodes", []string{"cp-1"}, ip), serving)
	create(nodeClient, "foreign-name", kubeletcsr.Signer, csrPEM(t, "system:node:cp-1", "system:nodes", []string{"cp-1", "api.example.com"}, ip), serving)
	create(admin, "not-a-node", kubeletcsr.Signer, csrPEM(t, "system:node:cp-1", "system:nodes", []string{"cp-1"}, ip), serving)
	create(nodeClient, "client", certificatesv1.KubeAPIServerClientKubeletSignerName, csrPEM(t, "system:node:cp-1", "system:nodes", nil, nil),
		[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth})

	decision := func(name string) (certificatesv1.RequestConditionType, string, error) {
		csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", "", err
		}

		for _, c := range csr.Status.Conditions {
			if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied {
				return c.Type, c.Message, nil
			}
		}

		return "", "", errors.New("pending")
	}

	for name, want := range map[string]struct {
		typ certificatesv1.RequestConditionType
		msg string
	}{
		"own":          {certificatesv1.CertificateApproved, "its own names and addresses"},
		"foreign-name": {certificatesv1.CertificateDenied, `"api.example.com" is not one of node cp-1's own names`},
		"not-a-node":   {certificatesv1.CertificateDenied, "not by a node"},
	} {
		testenv.Eventually(t, waitTimeout, name+" decided", func() error {
			typ, msg, err := decision(name)
			if err != nil {
				return err
			}

			if typ != want.typ || !strings.Contains(msg, want.msg) {
				return fmt.Errorf("%s %q, want %s naming %q", typ, msg, want.typ, want.msg)
			}

			return nil
		})
	}

	// The client-certificate request is not the approver's to decide: a
	// serving request created after it is decided, so a pass has seen both.
	create(nodeClient, "after-client", kubeletcsr.Signer, csrPEM(t, "system:node:cp-1", "system:nodes", []string{"cp-1"}, ip), serving)

	testenv.Eventually(t, waitTimeout, "after-client decided", func() error {
		_, _, err := decision("after-client")

		return err
	})

	if typ, _, err := decision("client"); err == nil {
		t.Errorf("a kube-apiserver-client-kubelet request was decided (%s) by the serving approver", typ)
	}
}

func adminClient(t *testing.T, ip string) *kubernetes.Clientset {
	t.Helper()

	n, err := (&talos.Dialer{}).Dial(context.Background(), ip, theBun)
	testenv.Must(t, err)

	defer n.Close()

	kc, err := n.Kubeconfig(context.Background())
	testenv.Must(t, err)

	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	testenv.Must(t, err)

	k, err := kubernetes.NewForConfig(cfg)
	testenv.Must(t, err)

	return k
}

// asNode is a client with a kubelet's identity: a client certificate
// CN=system:node:<node>, O=system:nodes from the cluster's Kubernetes CA.
func asNode(t *testing.T, ip, node string) *kubernetes.Clientset {
	t.Helper()

	caBlock, _ := pem.Decode(theBun.Certs.K8s.Crt)
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	testenv.Must(t, err)

	keyBlock, _ := pem.Decode(theBun.Certs.K8s.Key)

	var caKey crypto.Signer

	if k, err := x509.ParseECPrivateKey(keyBlock.Bytes); err == nil {
		caKey = k
	} else {
		k8, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
		testenv.Must(t, err)

		caKey = k8.(crypto.Signer) //nolint:forcetypeassert // a CA key signs
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	testenv.Must(t, err)

	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		NotBefore:    time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &key.PublicKey, caKey)
	testenv.Must(t, err)

	keyDER, err := x509.MarshalECPrivateKey(key)
	testenv.Must(t, err)

	k, err := kubernetes.NewForConfig(&rest.Config{
		Host: "https://" + net.JoinHostPort(ip, "6443"),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   theBun.Certs.K8s.Crt,
			CertData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			KeyData:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		},
		Timeout: 10 * time.Second,
	})
	testenv.Must(t, err)

	return k
}
