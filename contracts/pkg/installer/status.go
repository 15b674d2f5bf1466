package installer

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

var errNoInstallation = errors.New("no IchorInstallation")

// writeStatus changes the IchorInstallation's status with set and writes it
// with the resourceVersion it read, again on a conflict: the controller
// writes other conditions and fields of the same status.
func (in *Installer) writeStatus(ctx context.Context, set func(st *ichorv1alpha1.IchorInstallationStatus)) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		ii := &ichorv1alpha1.IchorInstallation{}

		err := in.c.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii)
		if apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err) {
			return errNoInstallation
		}

		if err != nil {
			return err
		}

		set(&ii.Status)

		for i := range ii.Status.Conditions {
			if ii.Status.Conditions[i].Type == ichorv1alpha1.InstalledCondition {
				ii.Status.Conditions[i].ObservedGeneration = ii.Generation
			}
		}

		return in.c.Status().Update(ctx, ii, client.FieldOwner(install.FieldManager))
	})
}

// setInstalled sets the Installed condition.
func setInstalled(st *ichorv1alpha1.IchorInstallationStatus, status metav1.ConditionStatus, reason, message string) {
	if len(message) > 32000 {
		message = message[:32000] + "…"
	}

	apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: ichorv1alpha1.InstalledCondition, Status: status, Reason: reason, Message: message,
	})
}
