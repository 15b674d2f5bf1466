// Package leader holds the timings of the controller replicas' leader
// election.
package leader

import (
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// The leader renews its Lease every RetryPeriod: an update of the Lease,
// the one write the controller makes whatever the fleet does. client-go's
// default, every 2 s, is 1,800 writes an hour, nearly two per machine per
// hour at 1,000 machines; every 5 s it is 720. A renewal that fails is
// tried again every RetryPeriod until RenewDeadline, three tries where the
// default makes five in 10 s, so the leader now rides out an API server
// that does not answer for up to 15 s (10 s before). A crashed leader's
// Lease is taken by another replica LeaseDuration after its last renewal,
// plus up to 2.2 RetryPeriods (a candidate's jittered retry): at most 31 s,
// where the defaults (15 s, 10 s, 2 s) take at most 19 s.
// client-go requires LeaseDuration > RenewDeadline > 1.2 × RetryPeriod
// (k8s.io/client-go/tools/leaderelection/leaderelection.go, NewLeaderElector).
const (
	LeaseDuration = 20 * time.Second
	RenewDeadline = 15 * time.Second
	RetryPeriod   = 5 * time.Second
)

// Apply sets the leader election timings on a manager's options.
func Apply(o *ctrl.Options) {
	lease, renew, retry := LeaseDuration, RenewDeadline, RetryPeriod
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = &lease, &renew, &retry
}
