package server_test

import (
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"fmt"
	"net"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	talosclient "github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/credential"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/tools/talosemu"
	"github.com/maeshinshin/ichor/tools/testenv"
	"github.com/maeshinshin/ichor/uiserver/internal/kube"
	"github.com/maeshinshin/ichor/uiserver/internal/nodes"
)

// The emulated world of the node reads: one control plane running the
// cluster's configuration, with its etcd bootstrapped.
const (
	nodeName   = "node-cp"
	nodeMAC    = "0a:00:00:00:66:01"
	nodeSubnet = "127.0.102.0/24"
	// downAddress answers nothing: no machine of the world has it.
	downAddress = "127.0.102.250"
)

var (
	world    *talosemu.World
	nodeBun  *secrets.Bundle
	nodeSvc  *nodes.Service
	nodeAddr string
	// backendClient acts as ichor-ui itself.
	backendClient client.Client
)

// setupNodes starts the world, stores the cluster's bundle, provisions the
// node, and starts the signer. The cluster must exist.
func setupNodes(ctx context.Context, s *testenv.Suite, clients *kube.Clients, backend client.Client) error {
	spec := &talosemu.Spec{
		Subnet: nodeSubnet,
		Machines: []talosemu.MachineSpec{{
			Name: nodeName, Role: talosemu.RoleHintControlPlane,
			Links: []talosemu.LinkSpec{{Name: "enp0s1", MAC: nodeMAC}},
		}},
		Durations: talosemu.Durations{
			Install: talosemu.Duration(100 * time.Millisecond),
			Reboot:  talosemu.Duration(100 * time.Millisecond),
			Boot:    talosemu.Duration(50 * time.Millisecond),
		},
	}

	var err error

	if world, err = talosemu.Start(ctx, spec, s.Dir); err != nil {
		return fmt.Errorf("starting the emulated world: %w", err)
	}

	if nodeBun, err = bundle.Generate(secrets.NewClock(), "v1.14"); err != nil {
		return err
	}

	c := testClusterObject()

	sec, err := bundle.Secret(testNS, c.Spec.SecretsBundleRef, nodeBun)
	if err != nil {
		return err
	}

	if err := admin.Create(ctx, sec); err != nil {
		return err
	}

	em, err := world.Machine(nodeName)
	if err != nil {
		return err
	}

	nodeAddr = em.IP()

	now := metav1.Now()
	tm := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: nodeName},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: testCluster, Address: nodeAddr, Role: ichorv1alpha1.RoleControlPlane, Hostname: nodeName,
			Identity: ichorv1alpha1.MachineIdentity{UUID: "uuid-" + nodeName},
			Approval: ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
			Install:  ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
			Network:  ichorv1alpha1.MachineNetwork{MACAddress: nodeMAC, DHCP: ptr.To(true)},
		},
	}

	res, err := render.Render(render.Input{Cluster: c, Machine: tm, Bundle: nodeBun})
	if err != nil {
		return fmt.Errorf("rendering the node's configuration: %w", err)
	}

	if err := em.ApplyInMaintenance(ctx, res.Bytes, 30*time.Second); err != nil {
		return err
	}

	if err := admin.Create(ctx, tm); err != nil {
		return err
	}

	tm.Status.Stage = ichorv1alpha1.StageRunning
	tm.Status.Installed = true

	if err := admin.Status().Update(ctx, tm); err != nil {
		return err
	}

	if err := bootstrapEtcd(ctx); err != nil {
		return err
	}

	backendClient = backend
	nodeSvc = &nodes.Service{
		Clients: clients, ClusterName: testCluster,
		Credentials: &nodes.Credentials{Client: backend, Namespace: testNS, ClusterName: testCluster},
	}

	go signer(ctx)

	return nil
}

// adminTalos is a Talos client with an os:admin certificate from the bundle (the test's own).
func adminTalos(ctx context.Context) (*talosclient.Client, error) {
	pem, err := nodeBun.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Admin), time.Hour)
	if err != nil {
		return nil, err
	}

	pair, err := tls.X509KeyPair(pem.Crt, pem.Key)
	if err != nil {
		return nil, err
	}

	roots := stdx509.NewCertPool()
	roots.AppendCertsFromPEM(nodeBun.Certs.OS.Crt)

	return talosclient.New(ctx, talosclient.WithEndpoints(net.JoinHostPort(nodeAddr, "50000")),
		talosclient.WithTLSConfig(&tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS13}))
}

func bootstrapEtcd(ctx context.Context) error {
	c, err := adminTalos(ctx)
	if err != nil {
		return err
	}
	defer c.Close() //nolint:errcheck

	deadline := time.Now().Add(60 * time.Second)

	for {
		err := c.Bootstrap(ctx, &machine.BootstrapRequest{})
		if err == nil {
			return nil
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("bootstrapping etcd on %s: %w", nodeName, err)
		}

		time.Sleep(200 * time.Millisecond)
	}
}

// signer answers TalosCredentialRequests the way the controller's
// credentialrequest reconciler does, with the same signing code
// (contracts/pkg/credential): ichor-ui's module cannot import the
// controller's internal package, and no controller runs in this suite.
func signer(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}

		list := &ichorv1alpha1.TalosCredentialRequestList{}
		if err := admin.List(ctx, list, client.InNamespace(testNS)); err != nil {
			continue
		}

		for i := range list.Items {
			tcr := &list.Items[i]
			if len(tcr.Status.Conditions) > 0 {
				continue
			}

			sign(ctx, tcr)
		}
	}
}

func sign(ctx context.Context, tcr *ichorv1alpha1.TalosCredentialRequest) {
	cond := metav1.Condition{Type: ichorv1alpha1.IssuedCondition, Status: metav1.ConditionTrue, Reason: "Issued", Message: "signed"}

	r, err := credential.Role(tcr.Spec.Purpose)
	if err == nil {
		var pub any

		if pub, err = credential.ParsePublicKey(tcr.Spec.PublicKey); err == nil {
			var cert *credential.Certificate

			if cert, err = credential.Sign(nodeBun, pub, r, "test", time.Now(), credential.Duration(tcr.Spec)); err == nil {
				exp := metav1.NewTime(cert.NotAfter)
				tcr.Status.Role, tcr.Status.Certificate, tcr.Status.CA, tcr.Status.ExpiresAt = string(r), string(cert.PEM), string(cert.CA), &exp

				if tcr.Spec.Purpose == ichorv1alpha1.PurposeRotationCredentials {
					var kube []byte

					if kube, _, err = credential.SignKubernetes(nodeBun, pub, "test", time.Now(), credential.Duration(tcr.Spec)); err == nil {
						tcr.Status.KubernetesCertificate, tcr.Status.KubernetesCA = string(kube), string(nodeBun.Certs.K8s.Crt)
					}
				}
			}
		}
	}

	if err != nil {
		cond = metav1.Condition{Type: ichorv1alpha1.DeniedCondition, Status: metav1.ConditionTrue, Reason: "Denied", Message: err.Error()}
	}

	apimeta.SetStatusCondition(&tcr.Status.Conditions, cond)
	_ = admin.Status().Update(ctx, tcr)
}
