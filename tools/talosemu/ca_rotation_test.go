package talosemu_test

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	"github.com/siderolabs/talos/pkg/machinery/config/types/meta"
	"github.com/siderolabs/talos/pkg/machinery/role"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// caStage is what one stage of Talos's CA rotation writes into a machine's
// config (t:pkg/rotate/pki/talos/talos.go, t:pkg/rotate/pki/kubernetes/kubernetes.go
// with t:pkg/machinery/config/generate/rotatepatcher/kubernetes.go for the
// multi-document KubeAPIServerCAConfig): the issuing CA and the other CAs
// accepted beside it.
type caStage struct {
	os, kube             *x509.PEMEncodedCertificateAndKey
	osAccepted, kubeAcc  []*x509.PEMEncodedCertificateAndKey
	name                 string
	oldTalos, oldKube    bool // whether a client of the old CA (cert and trust) still gets in
	newTalosOldTrust     bool // whether a new-CA client trusting only the old CA still gets in
	newKubeNeedsNewTrust bool
	oldCertIn            bool // whether an old-CA Kubernetes client certificate, trusting both CAs, gets in
}

// stageConfig rewrites a machine's config for a stage: machine.ca and
// machine.acceptedCAs, and the KubeAPIServerCAConfig document (control
// planes: issuingCA with its key; workers: no issuing CA, the accepted list
// with the issuing CA's certificate first, as K8sSetCA does on workers).
func stageConfig(t testing.TB, data []byte, controlPlane bool, s caStage) []byte {
	t.Helper()

	loaded, err := configloader.NewFromBytes(data)
	if err != nil {
		t.Fatal(err)
	}

	// a loaded container is read-only; its clone is writable
	cfg := loaded.Clone()
	raw := cfg.RawV1Alpha1()
	if controlPlane {
		raw.MachineConfig.MachineCA = s.os
	} else {
		raw.MachineConfig.MachineCA = &x509.PEMEncodedCertificateAndKey{Crt: s.os.Crt}
	}

	raw.MachineConfig.MachineAcceptedCAs = nil
	for _, a := range s.osAccepted {
		raw.MachineConfig.MachineAcceptedCAs = append(raw.MachineConfig.MachineAcceptedCAs, &x509.PEMEncodedCertificate{Crt: a.Crt})
	}

	docs := cfg.Documents()
	for i, d := range docs {
		if _, ok := d.(*k8s.KubeAPIServerCAConfigV1Alpha1); !ok {
			continue
		}

		ca := k8s.NewKubeAPIServerCAConfigV1Alpha1()
		if controlPlane {
			ca.APIIssuingCA = &meta.CertificateAndKey{Cert: string(s.kube.Crt), Key: string(s.kube.Key)}
		} else {
			ca.APIAcceptedCAs = []string{string(s.kube.Crt)}
		}

		for _, a := range s.kubeAcc {
			ca.APIAcceptedCAs = append(ca.APIAcceptedCAs, string(a.Crt))
		}

		docs[i] = ca
	}

	out, err := container.New(docs...)
	if err != nil {
		t.Fatal(err)
	}

	b, err := out.EncodeBytes()
	if err != nil {
		t.Fatal(err)
	}

	return b
}

// talosClientOf dials endpoint with an os:admin certificate from certCA,
// trusting the CAs of trust.
func talosClientOf(t testing.TB, endpoint string, certCA *secrets.Bundle, trust ...*x509.PEMEncodedCertificateAndKey) (*client.Client, error) {
	t.Helper()

	crt, err := certCA.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Admin), time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	pair, err := tls.X509KeyPair(crt.Crt, crt.Key)
	if err != nil {
		t.Fatal(err)
	}

	roots := stdx509.NewCertPool()
	for _, c := range trust {
		roots.AppendCertsFromPEM(c.Crt)
	}

	return client.New(t.Context(), client.WithEndpoints(endpoint), client.WithTLSConfig(&tls.Config{
		Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS13,
	}))
}

// talosWorks reports whether Version answers with that client.
func talosWorks(t testing.TB, endpoint string, certCA *secrets.Bundle, trust ...*x509.PEMEncodedCertificateAndKey) error {
	t.Helper()

	c, err := talosClientOf(t, endpoint, certCA, trust...)
	if err != nil {
		return err
	}
	defer c.Close() //nolint:errcheck

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()

	_, err = c.Version(ctx)

	return err
}

// kubeWorks reports whether an admin client certificate of certCA, trusting
// trust, lists the Nodes of the API server at host.
func kubeWorks(t testing.TB, host string, certCA *x509.PEMEncodedCertificateAndKey, trust ...*x509.PEMEncodedCertificateAndKey) error {
	t.Helper()

	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(certCA)
	if err != nil {
		t.Fatal(err)
	}

	crt, err := x509.NewKeyPair(ca, x509.CommonName("ca-rotation-test"), x509.Organization("system:masters"), x509.NotAfter(time.Now().Add(time.Hour)),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}))
	if err != nil {
		t.Fatal(err)
	}

	var trustPEM []byte
	for _, c := range trust {
		trustPEM = append(trustPEM, c.Crt...)
	}

	kube, err := kubernetes.NewForConfig(&rest.Config{
		Host:            host,
		TLSClientConfig: rest.TLSClientConfig{CAData: trustPEM, CertData: crt.CrtPEM, KeyData: crt.KeyPEM},
		Timeout:         5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}

	_, err = kube.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})

	return err
}

// TestCARotationStages (issue 24 item 4): the emulated apid and Kubernetes
// control plane follow the three stages of Talos's CA rotation, applied live
// (no reboot) to a 1+1 cluster, control plane first, as `talosctl rotate-ca`
// does: a client certificate of any accepted CA gets in; the servers present
// certificates of the issuing CA (apid re-issues its own at once; the
// kube-apiserver restarts with the new client-CA bundle and serving
// certificate); after the old CA is dropped its clients are refused, the
// kubelets still answer and every Node stays Ready.
func TestCARotationStages(t *testing.T) {
	opt := testOptions()
	opt.Kubernetes, opt.KubeAssets = true, kubeAssets(t)

	w, err := talosemu.Start(t.Context(), testSpec(2), t.TempDir(), opt)
	if err != nil {
		t.Fatal(err)
	}

	t.Cleanup(w.Close)

	ms := w.Machines()
	c := newRealCluster(t, ms[0].IP(), nil)
	c.provisionAll(t, ms[:1], ms[1:])

	a := c.admin(t, ms[0].IP())
	if _, err := a.MachineClient.Bootstrap(t.Context(), &machineapi.BootstrapRequest{}); err != nil {
		t.Fatal(err)
	}

	waitVoters(t, a, 1, 60*time.Second)

	kc, err := a.Kubeconfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	kube := kubeClient(t, kc)
	waitNodes(t, kube, 2, nodeReady, "2 Ready nodes")

	old := c.bundle

	next, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersionCurrent)
	if err != nil {
		t.Fatal(err)
	}

	host := "https://" + ms[0].IP() + ":6443"
	oldOS, newOS, oldKube, newKube := old.Certs.OS, next.Certs.OS, old.Certs.K8s, next.Certs.K8s

	// The client that manages the cluster through the stages: the old CA's
	// certificate until the new CA is accepted everywhere, the new one after.
	stages := []caStage{
		{name: "accept", os: oldOS, osAccepted: []*x509.PEMEncodedCertificateAndKey{newOS}, kube: oldKube, kubeAcc: []*x509.PEMEncodedCertificateAndKey{newKube},
			oldTalos: true, oldKube: true, newTalosOldTrust: true, oldCertIn: true},
		{name: "issue", os: newOS, osAccepted: []*x509.PEMEncodedCertificateAndKey{oldOS}, kube: newKube, kubeAcc: []*x509.PEMEncodedCertificateAndKey{oldKube},
			newKubeNeedsNewTrust: true, oldCertIn: true},
		{name: "drop", os: newOS, kube: newKube, newKubeNeedsNewTrust: true},
	}

	driver := old

	for _, s := range stages {
		// control plane first, then the worker (t:pkg/rotate/pki/internal/helpers patchAllNodes)
		for i, m := range ms {
			base := c.worker
			if i == 0 {
				base = c.controlPlane
			}

			cl, err := talosClientOf(t, m.IP(), driver, oldOS, newOS)
			if err != nil {
				t.Fatal(err)
			}

			_, err = cl.ApplyConfiguration(t.Context(), &machineapi.ApplyConfigurationRequest{
				Data: stageConfig(t, base, i == 0, s), Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT,
			})
			_ = cl.Close()

			if err != nil {
				t.Fatalf("stage %s, %s: apply: %v", s.name, m.Name(), err)
			}
		}

		if s.name == "accept" {
			driver = next
		}

		for _, m := range ms {
			// a client of the new CA trusting both gets in from the first stage on
			testenv.Eventually(t, 60*time.Second, fmt.Sprintf("stage %s: a new-CA client on %s", s.name, m.Name()), func() error {
				return talosWorks(t, m.IP(), next, oldOS, newOS)
			})

			if err := talosWorks(t, m.IP(), old, oldOS); (err == nil) != s.oldTalos {
				t.Errorf("stage %s: an old talosconfig on %s: %v, want it to work: %t", s.name, m.Name(), err, s.oldTalos)
			}

			if err := talosWorks(t, m.IP(), next, oldOS); (err == nil) != s.newTalosOldTrust {
				t.Errorf("stage %s: a new-CA client trusting only the old CA on %s: %v, want it to work: %t", s.name, m.Name(), err, s.newTalosOldTrust)
			}
		}

		// The kube-apiserver restarts with the stage's CAs: a new-CA client
		// trusting both gets in once it serves again; what an old one gets
		// and whose certificate the server presents follow the stage.
		testenv.Eventually(t, 120*time.Second, "stage "+s.name+": a new-CA Kubernetes client", func() error {
			if err := kubeWorks(t, host, newKube, oldKube, newKube); err != nil {
				return err
			}

			if err := kubeWorks(t, host, oldKube, oldKube); (err == nil) != s.oldKube {
				return fmt.Errorf("an old-CA client trusting the old CA: %w, want it to work: %t", err, s.oldKube)
			}

			if err := kubeWorks(t, host, oldKube, oldKube, newKube); (err == nil) != s.oldCertIn {
				return fmt.Errorf("an old-CA client certificate trusting both CAs: %w, want it in: %t", err, s.oldCertIn)
			}

			if err := kubeWorks(t, host, newKube, oldKube); (err == nil) == s.newKubeNeedsNewTrust {
				return fmt.Errorf("a client trusting only the old CA: %w, want it refused: %t (the serving certificate's issuer)", err, s.newKubeNeedsNewTrust)
			}

			return nil
		})
	}

	// After the drop: the old CA's client certificate is refused (401, not a
	// TLS error, since the client trusts the new serving certificate).
	if err := kubeWorks(t, host, oldKube, newKube); err == nil {
		t.Fatal("an old-CA client certificate still gets into the kube-apiserver after the old CA was dropped")
	}

	if err := talosWorks(t, ms[1].IP(), old, newOS); err == nil {
		t.Fatal("an old-CA Talos client certificate still gets into the worker after the old CA was dropped")
	}

	// The Kubeconfig RPC's admin kubeconfig is the new CA's, and both Nodes
	// are still Ready.
	nc, err := talosClientOf(t, ms[0].IP(), next, newOS)
	if err != nil {
		t.Fatal(err)
	}

	defer nc.Close() //nolint:errcheck

	kc, err = nc.Kubeconfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	waitNodes(t, kubeClient(t, kc), 2, nodeReady, "2 Ready nodes after the rotation")

	if err := talosWorks(t, ms[0].IP(), next, newOS); err != nil {
		t.Fatal(errors.Join(errors.New("the new talosconfig after the rotation"), err))
	}
}
