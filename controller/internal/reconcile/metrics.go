package reconcile

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// pausedSkips counts the reconciles the skeleton skipped because the object
// or its TalosCluster was paused, or the cluster's CNI preset is not one
// Ichor manages, by controller: an operator sees that a pause holds, and a test has a positive marker that a controller looked at
// a paused object and did nothing.
var pausedSkips = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "ichor_reconcile_paused_skips_total",
	Help: "Reconciles skipped because the object or its TalosCluster has spec.paused, by controller.",
}, []string{"controller"})

func init() { //nolint:gochecknoinits // metrics register with controller-runtime's registry once
	metrics.Registry.MustRegister(pausedSkips)
}

// PausedSkips returns how many reconciles controller has skipped for a pause.
func PausedSkips(controller string) float64 {
	m := &dto.Metric{}
	if err := pausedSkips.WithLabelValues(controller).Write(m); err != nil {
		return 0
	}

	return m.GetCounter().GetValue()
}
