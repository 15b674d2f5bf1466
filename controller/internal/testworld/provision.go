// Package testworld is test set-up shared by the controller's suites that
// run on a provisioned emulated cluster (operation, talosupgrade): the
// machines created as discovery does, approved as a person does, cp-1
// bootstrapped as `ichor init` does, and provisioned by the real lifecycle
// reconciler. Only tests import it.
package testworld

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/tools/talosemu"
)

// Cluster names the emulated machines and where their TalosMachines go.
type Cluster struct {
	Client    client.Client
	World     *talosemu.World
	Bundle    *secrets.Bundle
	Namespace string
	Name      string
	// Machines are the emulated machines' names; those starting with "cp-"
	// are control planes, and "cp-1" is bootstrapped.
	Machines []string
	// Labels, when set, adds labels to a machine's TalosMachine.
	Labels func(machine string) map[string]string
}

// Provision creates the approved machines and waits until the manager's
// lifecycle reconciler has provisioned each and it is Ready, bootstrapping
// cp-1's etcd once it runs; it gives up at deadline.
func (c Cluster) Provision(ctx context.Context, deadline time.Time) error {
	for _, n := range c.Machines {
		if err := c.create(ctx, n); err != nil {
			return err
		}
	}

	if err := c.bootstrap(ctx, deadline); err != nil {
		return err
	}

	for _, n := range c.Machines {
		for {
			m := &ichorv1alpha1.TalosMachine{}
			if err := c.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: n}, m); err != nil {
				return err
			}

			if apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ProvisionedCondition) &&
				apimeta.IsStatusConditionTrue(m.Status.Conditions, ichorv1alpha1.ReadyCondition) {
				break
			}

			if time.Now().After(deadline) {
				return fmt.Errorf("%s was not provisioned and Ready: %+v", n, m.Status.Conditions)
			}

			time.Sleep(200 * time.Millisecond)
		}
	}

	return nil
}

// create makes the machine's TalosMachine as discovery and approval leave it.
func (c Cluster) create(ctx context.Context, n string) error {
	em, err := c.World.Machine(n)
	if err != nil {
		return err
	}

	role := ichorv1alpha1.RoleWorker
	if strings.HasPrefix(n, "cp-") {
		role = ichorv1alpha1.RoleControlPlane
	}

	labels := map[string]string{ichorv1alpha1.ClusterLabel: c.Name}
	if c.Labels != nil {
		for k, v := range c.Labels(n) {
			labels[k] = v
		}
	}

	now := metav1.Now()
	tm := &ichorv1alpha1.TalosMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: n, Labels: labels},
		Spec: ichorv1alpha1.TalosMachineSpec{
			ClusterName: c.Name,
			Identity:    ichorv1alpha1.MachineIdentity{UUID: em.UUID(), Serial: "SER-" + n},
			Address:     em.IP(),
			Approval:    ichorv1alpha1.MachineApproval{State: ichorv1alpha1.ApprovalApproved, DecidedBy: "admin", DecidedAt: &now},
			Role:        role,
			Hostname:    n,
			Install:     ichorv1alpha1.MachineInstall{Disk: &ichorv1alpha1.DiskSelector{DevicePath: "/dev/nvme0n1"}},
		},
	}

	if err := c.Client.Create(ctx, tm); err != nil {
		return err
	}

	// The machine's reconcilers may write its status first: read it again on a conflict.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(tm), tm); err != nil {
			return err
		}

		tm.Status.Stage = ichorv1alpha1.StageMaintenance
		tm.Status.MaintenanceFingerprint = em.MaintenanceFingerprint()

		return c.Client.Status().Update(ctx, tm)
	})
}

// bootstrap waits until the first control plane runs, then bootstraps its
// etcd, as `ichor init` does.
func (c Cluster) bootstrap(ctx context.Context, deadline time.Time) error {
	em, err := c.World.Machine(FirstControlPlane)
	if err != nil {
		return err
	}

	for {
		m := &ichorv1alpha1.TalosMachine{}
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: FirstControlPlane}, m); err != nil {
			return err
		}

		if m.Status.Stage == ichorv1alpha1.StageRunning {
			n, err := (&talos.Dialer{}).Dial(ctx, em.IP(), c.Bundle)
			if err != nil {
				return err
			}

			_, err = n.Client().MachineClient.Bootstrap(ctx, &machine.BootstrapRequest{})
			n.Close()

			if err == nil || status.Code(err) == codes.AlreadyExists {
				return nil
			}
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("cp-1 did not reach running to be bootstrapped: stage %q", m.Status.Stage)
		}

		time.Sleep(200 * time.Millisecond)
	}
}
