package operation

// The wait for a control plane's kube-apiserver to restart after an apply.

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// apiServerDownPolls is how many polls in a row /readyz must fail for a
// kube-apiserver restart to count as seen.
const apiServerDownPolls = 3

// waitAPIServer waits for the control plane's own kube-apiserver to restart
// and answer /readyz (Talos re-renders its static pod; the kubelet restarts it
// when it next reads the manifest, so the restart may come some seconds after
// the apply). The restart counts as seen when /readyz fails for
// apiServerDownPolls polls in a row (one failed poll is a blip, not the
// restart); once seen, the server must come back. Never seen away, it must
// stay ready for APIServerSettle after the apply (a restart quicker than the
// polls). Both are measured from the machine's start, which the apply follows.
func (w *work) waitAPIServer(ctx context.Context) (ctrl.Result, error) {
	since := w.r.now().Sub(w.mp.StartedAt.Time)
	if limit := w.r.APIServerTimeout + w.r.APIServerSettle; since > limit {
		return w.fail(fmt.Sprintf("the kube-apiserver on %s did not restart and answer /readyz within %s of the apply", w.m.Spec.Address, limit))
	}

	err := w.apiServerReady(ctx)

	switch w.mp.Step {
	case stepWaitAPIServer:
		switch {
		case err != nil:
			return w.next(stepAPIServerDown, "the kube-apiserver does not answer /readyz: "+err.Error())
		case since < w.r.APIServerSettle:
			w.mp.Message = "the kube-apiserver answers /readyz; watching it until its restart shows or " + w.r.APIServerSettle.String() + " pass"

			return w.poll(), nil
		default:
			return w.finishMachine(ctx, "the kube-apiserver answered /readyz throughout "+w.r.APIServerSettle.String()+" (a restart quicker than the polls)")
		}
	case stepAPIServerDown:
		switch {
		case err == nil:
			// A blip: back to watching (the settle time still runs from the start).
			return w.next(stepWaitAPIServer, "the kube-apiserver answers /readyz again after a failed poll")
		case w.elapsed() >= apiServerDownPolls*w.r.PollInterval:
			return w.next(stepAPIServerBack, "the kube-apiserver restarts")
		default:
			return w.poll(), nil
		}
	default: // stepAPIServerBack
		if err != nil {
			w.mp.Message = "waiting for /readyz: " + err.Error()

			return w.poll(), nil //nolint:nilerr // a kube-apiserver that restarts is waited for
		}

		return w.finishMachine(ctx, "the kube-apiserver restarted and answers /readyz")
	}
}

func (w *work) apiServerReady(ctx context.Context) error {
	cfg, err := w.r.workloadConfig(ctx, w.op, w.st.Bundle)
	if err != nil {
		return err
	}

	return workload.APIServerReady(ctx, cfg, w.m.Spec.Address)
}
