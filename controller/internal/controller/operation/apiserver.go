package operation

// The wait for a control plane's kube-apiserver to restart after an apply.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// apiServerDownPolls is how many polls in a row must find the kube-apiserver
// away for its restart to count as seen.
const apiServerDownPolls = 3

// readyz is what one poll of a control plane's own /readyz found.
type readyz int

const (
	// readyzOK: the kube-apiserver answers /readyz with ok.
	readyzOK readyz = iota
	// readyzAway: nothing listens (the connection is refused, reset or cut):
	// the process is gone, as in a restart of its static pod.
	readyzAway
	// readyzUnknown: the server answers but is not ready (a server starting,
	// or one whose etcd check is slow on a loaded machine), or the poll
	// failed for another reason (a timeout, the kubeconfig could not be
	// fetched through Talos). Not a sign of a restart either way.
	readyzUnknown
)

// readyzOf classifies the error of a /readyz poll. Only a connection that
// finds nobody listening is a restart's mark: a server that answers "not
// ready" is still the server that was running, and counting it as the
// restart would end the wait before the real restart comes (the race behind
// TestOperation_APIServerRestartRollout's "connection refused" after the
// rollout: the previous kube-apiserver, still finishing its own start on a
// busy machine, was taken for the restarted one).
func readyzOf(err error) readyz {
	switch {
	case err == nil:
		return readyzOK
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return readyzAway
	default:
		return readyzUnknown
	}
}

// waitAPIServer waits for the control plane's own kube-apiserver to restart
// and answer /readyz (Talos re-renders its static pod; the kubelet restarts it
// when it next reads the manifest, so the restart may come some seconds after
// the apply). The restart counts as seen when the server is away (nothing
// listens on its port) for apiServerDownPolls polls in a row; a server that
// answers in between was a blip, not the restart. Once seen, the server must
// come back and answer /readyz with ok. Never seen away, it must answer ok
// once APIServerSettle has passed since the apply (a restart quicker than
// the polls). Both are measured from the machine's start, which the apply
// follows. A server that answers "not ready", or a poll that fails another
// way, moves nothing (readyzOf).
func (w *work) waitAPIServer(ctx context.Context) (ctrl.Result, error) {
	since := w.r.now().Sub(w.mp.StartedAt.Time)
	if limit := w.r.APIServerTimeout + w.r.APIServerSettle; since > limit {
		return w.fail(fmt.Sprintf("the kube-apiserver on %s did not restart and answer /readyz within %s of the apply", w.m.Spec.Address, limit))
	}

	err := w.apiServerReady(ctx)
	state := readyzOf(err)

	switch w.mp.Step {
	case stepWaitAPIServer:
		switch {
		case state == readyzAway:
			return w.next(stepAPIServerDown, "the kube-apiserver does not answer: "+err.Error())
		case state == readyzUnknown:
			w.mp.Message = "the kube-apiserver has not gone away yet and does not answer /readyz with ok: " + err.Error()

			return w.poll(), nil
		case since < w.r.APIServerSettle:
			w.mp.Message = "the kube-apiserver answers /readyz; watching it until its restart shows or " + w.r.APIServerSettle.String() + " pass"

			return w.poll(), nil
		default:
			return w.finishMachine(ctx, "the kube-apiserver answered /readyz throughout "+w.r.APIServerSettle.String()+" (a restart quicker than the polls)")
		}
	case stepAPIServerDown:
		switch {
		case state == readyzOK:
			// A blip: back to watching (the settle time still runs from the start).
			return w.next(stepWaitAPIServer, "the kube-apiserver answers /readyz again after a failed poll")
		case state == readyzAway && w.elapsed() >= apiServerDownPolls*w.r.PollInterval:
			return w.next(stepAPIServerBack, "the kube-apiserver restarts")
		default:
			return w.poll(), nil
		}
	default: // stepAPIServerBack
		if state != readyzOK {
			w.mp.Message = "waiting for /readyz: " + err.Error()

			return w.poll(), nil
		}

		return w.finishMachine(ctx, "the kube-apiserver restarted and answers /readyz")
	}
}

// apiServerReady polls the machine's own /readyz. Not getting the cluster's
// kubeconfig through Talos says nothing about the kube-apiserver: that error
// never counts as the server being away.
func (w *work) apiServerReady(ctx context.Context) error {
	cfg, err := w.r.workloadConfig(ctx, w.op, w.st.Bundle)
	if err != nil {
		return fmt.Errorf("cannot poll /readyz: %s", err.Error())
	}

	return workload.APIServerReady(ctx, cfg, w.m.Spec.Address)
}
