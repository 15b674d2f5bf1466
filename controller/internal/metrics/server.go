package metrics

import (
	"crypto/tls"

	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ServerOptions are the options of the controller's metrics server: HTTPS on
// addr ("0" turns it off) with a certificate from certDir (tls.crt, tls.key)
// or, when it has none, a self-signed one made in memory at start; every
// request authenticated with a bearer token (TokenReview) and authorized
// (SubjectAccessReview: get on the non-resource URL /metrics, which the
// ClusterRole ichor-metrics-reader grants). Only HTTP/1.1 is offered, as the
// kubebuilder scaffold does since the HTTP/2 rapid-reset advisories
// (CVE-2023-44487).
func ServerOptions(addr, certDir string) metricsserver.Options {
	return metricsserver.Options{
		BindAddress:    addr,
		SecureServing:  true,
		CertDir:        certDir,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.NextProtos = []string{"http/1.1"}
			c.MinVersion = tls.VersionTLS12
		}},
	}
}

// Register adds the object Collector on reader (the manager's cache) to
// controller-runtime's registry; lockNamespace holds the lock Leases.
func Register(reader client.Reader, lockNamespace string) error {
	return ctrlmetrics.Registry.Register(&Collector{Reader: reader, LockNamespace: lockNamespace})
}
