package approval

import (
	"context"
	"errors"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// ErrBeingRemoved is returned by Decide for a machine whose removal has begun.
var ErrBeingRemoved = errors.New("the machine is being removed; wait until it reappears as pending")

// Refused is Decide's error when the shared checks refuse the decision; the
// caller words it for its audience (the CLI's lines, ichor-ui's gRPC status).
type Refused struct {
	Refusals []guard.Refusal
}

func (r *Refused) Error() string {
	msgs := make([]string, len(r.Refusals))
	for i, rf := range r.Refusals {
		msgs[i] = rf.Error()
	}

	return strings.Join(msgs, "; ")
}

// Decide records a person's approval or rejection (state) of the machine at
// key, as `ichor machine approve|reject` and ichor-ui's Approve/RejectMachine
// both do, through c (the person's own client, so admission sees them): it
// reads the machine, refuses one being removed (ErrBeingRemoved), lets mutate
// set the rest of the spec (the role, disks, network; an error from mutate is
// returned as is), stamps the decision with user and now, checks it with the
// guard (facts as the caller gathers them; a refusal is *Refused) and
// updates, reading again on a conflict.
func Decide(ctx context.Context, c client.Client, key client.ObjectKey, state, user string, now time.Time,
	facts func(context.Context, *ichorv1alpha1.TalosMachine) (guard.MachineFacts, error), mutate func(*ichorv1alpha1.TalosMachine) error,
) (*ichorv1alpha1.TalosMachine, error) {
	var out *ichorv1alpha1.TalosMachine

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		old := &ichorv1alpha1.TalosMachine{}
		if err := c.Get(ctx, key, old); err != nil {
			return err
		}

		if old.DeletionTimestamp != nil {
			return ErrBeingRemoved
		}

		m := old.DeepCopy()
		if err := mutate(m); err != nil {
			return err
		}

		m.Spec.Approval = ichorv1alpha1.MachineApproval{State: state, DecidedBy: user, DecidedAt: &metav1.Time{Time: now.UTC().Truncate(time.Second)}}

		f, err := facts(ctx, m)
		if err != nil {
			return err
		}

		refusals := guard.ValidateMachine(old, m, f)
		if rf := guard.CheckApprovalRecord(old, m, user); rf != nil {
			refusals = append(refusals, *rf)
		}

		if len(refusals) > 0 {
			return &Refused{Refusals: refusals}
		}

		if err := c.Update(ctx, m); err != nil {
			return err
		}

		out = m

		return nil
	})

	return out, err
}
