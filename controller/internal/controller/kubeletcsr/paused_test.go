package kubeletcsr_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/maeshinshin/ichor/controller/internal/controller/kubeletcsr"
	"github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/tools/testenv"
)

func setPaused(t *testing.T, paused bool) {
	t.Helper()
	testenv.SetClusterPaused(t, k8s, ns, clusterName, paused)
}

// TestPausedStops_KubeletCSR: while the cluster's spec.paused is true the
// approver decides nothing (a node's own serving request stays pending);
// unpausing approves it.
func TestPausedStops_KubeletCSR(t *testing.T) {
	ctx := context.Background()
	em, err := world.Machine("cp-1")
	testenv.Must(t, err)

	admin := adminClient(t, em.IP())
	nodeClient := asNode(t, em.IP(), "cp-1")

	before := reconcile.PausedSkips(kubeletcsr.ControllerName)

	setPaused(t, true)
	t.Cleanup(func() { setPaused(t, false) })

	// The marker: the manager's approver has looked at the paused cluster
	// (it then polls no more until the pause ends).
	testenv.Eventually(t, waitTimeout, "the approver sees the pause", func() error {
		if reconcile.PausedSkips(kubeletcsr.ControllerName) <= before {
			return errors.New("no paused reconcile yet")
		}

		return nil
	})

	ip := []net.IP{net.ParseIP(em.IP())}

	testenv.Eventually(t, waitTimeout, "create CSR held", func() error {
		_, err := nodeClient.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "held"},
			Spec: certificatesv1.CertificateSigningRequestSpec{
				SignerName: kubeletcsr.Signer, Request: csrPEM(t, "system:node:cp-1", "system:nodes", []string{"cp-1"}, ip), Usages: serving,
			},
		}, metav1.CreateOptions{})

		return err
	})

	// A pass made after the request exists, on the paused cluster, leaves it pending.
	_, err = (&kubeletcsr.Reconciler{Client: k8s, APIReader: k8s}).Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: clusterName}})
	testenv.Must(t, err)

	decided := func() (bool, error) {
		csr, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "held", metav1.GetOptions{})
		if err != nil {
			return false, err
		}

		return len(csr.Status.Conditions) > 0, nil
	}

	if d, err := decided(); err != nil || d {
		t.Fatalf("a request of a paused cluster was decided (%t, %v)", d, err)
	}

	setPaused(t, false)

	testenv.Eventually(t, waitTimeout, "held approved after unpausing", func() error {
		d, err := decided()
		if err == nil && !d {
			err = fmt.Errorf("still pending")
		}

		return err
	})
}
