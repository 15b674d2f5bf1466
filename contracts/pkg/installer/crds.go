package installer

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/contracts/pkg/crdcheck"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// checkCRDs is step 2: every CRD of the manifest against the one the API
// server holds. A change that is not additive, and not retired, refuses the
// whole run before anything of Ichor is changed.
func (in *Installer) checkCRDs(ctx context.Context) error {
	crds := install.ByStep(in.objs, install.StepCRDs)

	var (
		changes []crdcheck.Change
		stored  int
	)

	for _, next := range crds {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(next.GroupVersionKind())

		err := in.c.Get(ctx, client.ObjectKey{Name: next.GetName()}, cur)
		if apierrors.IsNotFound(err) {
			continue
		}

		if err != nil {
			in.stepf("CRD check")

			return fmt.Errorf("reading CustomResourceDefinition %s: %w", next.GetName(), err)
		}

		stored++

		c, err := crdcheck.Check(cur, next, in.o.Retired)
		if err != nil {
			in.stepf("CRD check")

			return err
		}

		changes = append(changes, c...)
	}

	refused := crdcheck.Refused(changes)
	if len(refused) > 0 {
		in.stepf("CRD check: %d of %d CRDs are installed; %d change(s) are not additive", stored, len(crds), len(refused))

		return crdcheck.Explain(refused)
	}

	in.stepf("CRD check: %d of %d CRDs are installed; every change is additive", stored, len(crds))

	for _, c := range changes {
		in.logf("      allowed, retired: %s", c)
	}

	return nil
}

// waitEstablished waits until every CRD is Established and its names accepted.
func (in *Installer) waitEstablished(ctx context.Context, crds []*unstructured.Unstructured) error {
	var pending []string

	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, in.o.CRDTimeout, true, func(ctx context.Context) (bool, error) {
		pending = pending[:0]

		for _, o := range crds {
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(o.GroupVersionKind())

			if err := in.c.Get(ctx, client.ObjectKey{Name: o.GetName()}, cur); err != nil {
				pending = append(pending, o.GetName()+" ("+err.Error()+")")

				continue
			}

			if !conditionTrue(cur, "Established") || !conditionTrue(cur, "NamesAccepted") {
				pending = append(pending, o.GetName())
			}
		}

		return len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the CRDs were not Established within %s: %s", in.o.CRDTimeout, strings.Join(pending, ", "))
	}

	return nil
}

func conditionTrue(o *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == typ {
			return m["status"] == "True"
		}
	}

	return false
}
