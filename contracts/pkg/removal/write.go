package removal

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// The writes of a confirmed removal, shared by `ichor node remove` and
// ichor-ui's RemoveMachine (both write as the person who confirmed it, through
// c): one update records the consent (the allow-delete annotation) and the
// options, then the machine is deleted; a refused delete takes the consent
// back, so nothing is left half-done.

// ErrReplaced is returned by Remove when the TalosMachine was deleted and
// created again (another UID) while the person confirmed.
var ErrReplaced = errors.New("the TalosMachine was replaced while the removal was confirmed; look at it again and retry")

const annotationTrue = "true"

// Result is what Remove did.
type Result struct {
	// Marked is the machine as the consent update left it.
	Marked *ichorv1alpha1.TalosMachine
	// UndoErr is set when the delete failed and taking the consent back
	// failed too: the allow-delete annotation has to be removed by hand.
	UndoErr error
}

// Remove marks confirmed (the machine as the person saw it, whose UID must
// still match) for removal with opts and deletes it. An error from the mark
// changes nothing; an error from the delete comes with the consent taken
// back (or Result.UndoErr saying it could not be).
func Remove(ctx context.Context, c client.Client, confirmed *ichorv1alpha1.TalosMachine, opts Options) (Result, error) {
	var res Result

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &ichorv1alpha1.TalosMachine{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(confirmed), cur); err != nil {
			return err
		}

		if cur.UID != confirmed.UID {
			return ErrReplaced
		}

		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}

		cur.Annotations[ichorv1alpha1.AllowDeleteAnnotation] = annotationTrue
		if opts.Reboot {
			cur.Annotations[ichorv1alpha1.RemoveRebootAnnotation] = annotationTrue
		}

		if opts.Force {
			cur.Spec.ForceRemove = true
		}

		if err := c.Update(ctx, cur); err != nil {
			return err
		}

		res.Marked = cur

		return nil
	})
	if err != nil {
		return res, fmt.Errorf("marking TalosMachine %s for removal: %w", confirmed.Name, err)
	}

	uid := res.Marked.UID
	if err := c.Delete(ctx, res.Marked, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		res.UndoErr = Undo(ctx, c, confirmed)

		return res, fmt.Errorf("removing TalosMachine %s: %w", confirmed.Name, err)
	}

	return res, nil
}

// Undo restores the allow-delete and remove-reboot annotations and
// spec.forceRemove of before, the machine as it was before the mark.
func Undo(ctx context.Context, c client.Client, before *ichorv1alpha1.TalosMachine) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &ichorv1alpha1.TalosMachine{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(before), cur); err != nil {
			return err
		}

		for _, a := range []string{ichorv1alpha1.AllowDeleteAnnotation, ichorv1alpha1.RemoveRebootAnnotation} {
			if v, ok := before.Annotations[a]; ok {
				cur.Annotations[a] = v
			} else {
				delete(cur.Annotations, a)
			}
		}

		cur.Spec.ForceRemove = before.Spec.ForceRemove

		return c.Update(ctx, cur)
	})
}
