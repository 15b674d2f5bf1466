package installer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// ProbeName names the dry-run MachineReclaim of the post-check.
const ProbeName = "ichor-installer-post-check"

// postChecks is step 8: the admission webhooks answer. The webhook Service
// must have a ready endpoint, and (unless SkipWebhookRefusal) a dry-run
// MachineReclaim the webhook must refuse (a TTL of a day, a Secret that does
// not exist) must be refused by the webhook itself, not by a call that
// failed: an unreachable webhook fails closed too, which proves nothing.
func (in *Installer) postChecks(ctx context.Context) error {
	what := "the webhook Service has ready endpoints, and the admission webhook refuses a dry-run MachineReclaim"
	if in.o.SkipWebhookRefusal {
		what = "the webhook Service has ready endpoints (the refusal check is off)"
	}

	in.stepf("post-checks: %s (waiting up to %s)", what, in.o.WaitTimeout)

	n, err := in.waitEndpoints(ctx)
	if err != nil {
		return err
	}

	in.logf("      Service %s has %d ready endpoint(s)", install.WebhookServiceName, n)

	if in.o.SkipWebhookRefusal {
		return nil
	}

	refusal, err := in.waitRefusal(ctx)
	if err != nil {
		return err
	}

	in.logf("      the webhook refused the dry run: %s", refusal)

	return nil
}

func (in *Installer) waitEndpoints(ctx context.Context) (int, error) {
	var ready int

	err := wait.PollUntilContextTimeout(ctx, pollInterval, in.o.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		slices := &discoveryv1.EndpointSliceList{}
		if err := in.c.List(ctx, slices, client.InNamespace(in.o.Namespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: install.WebhookServiceName}); err != nil {
			return false, nil //nolint:nilerr // retried until the timeout
		}

		ready = 0

		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					ready++
				}
			}
		}

		return ready > 0, nil
	})
	if err != nil {
		return 0, fmt.Errorf("the webhook Service %s/%s has no ready endpoint after %s: the API server cannot reach the admission webhooks",
			in.o.Namespace, install.WebhookServiceName, in.o.WaitTimeout)
	}

	return ready, nil
}

// waitRefusal creates the probe as a dry run until the webhook refuses it.
func (in *Installer) waitRefusal(ctx context.Context) (string, error) {
	var (
		last    error
		refusal string
	)

	err := wait.PollUntilContextTimeout(ctx, pollInterval, in.o.WaitTimeout, true, func(ctx context.Context) (bool, error) {
		probe := &ichorv1alpha1.MachineReclaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: in.o.Namespace, Name: ProbeName},
			Spec: ichorv1alpha1.MachineReclaimSpec{
				Address:        "192.0.2.1",
				CredentialsRef: ichorv1alpha1.SecretReference{Name: ProbeName + "-absent"},
				TTL:            &metav1.Duration{Duration: 24 * time.Hour},
			},
		}

		err := in.c.Create(ctx, probe, client.DryRunAll)
		if err == nil {
			return false, errors.New("the admission webhook admitted a dry-run MachineReclaim it must refuse (a TTL of a day, a Secret that does not exist)")
		}

		msg := err.Error()
		if (apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)) &&
			strings.Contains(msg, "admission webhook") && strings.Contains(msg, "denied the request") {
			refusal = oneLine(msg)
			if len(refusal) > 200 {
				refusal = refusal[:200] + "…"
			}

			return true, nil
		}

		last = err

		return false, nil
	})

	switch {
	case err == nil:
		return refusal, nil
	case last == nil || !wait.Interrupted(err):
		return "", err
	default:
		return "", fmt.Errorf("the admission webhook did not answer within %s (last: %w)", in.o.WaitTimeout, last)
	}
}
