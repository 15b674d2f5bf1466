package server

import (
	"log/slog"
	"net/http"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
)

// NewRegistry is ichor-ui's metrics registry: the Go runtime and process
// collectors, then whatever the issuer and the server register.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// KubeMetricsAuth is the check of /metrics callers that ichor-ui's main
// installs (Options.MetricsAuth): the same as the controller's metrics
// server, controller-runtime's filter — the caller's bearer token is
// reviewed by the API server (TokenReview) and the caller must be allowed
// get on the non-resource URL /metrics (SubjectAccessReview; the
// ClusterRole ichor-metrics-reader grants it). Anything else is 401 or 403.
func KubeMetricsAuth(cfg *rest.Config, log *slog.Logger) func(http.Handler) (http.Handler, error) {
	return func(h http.Handler) (http.Handler, error) {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, err
		}
		filter, err := filters.WithAuthenticationAndAuthorization(cfg, hc)
		if err != nil {
			return nil, err
		}
		return filter(logr.FromSlogHandler(log.Handler()).WithName("metrics"), h)
	}
}
