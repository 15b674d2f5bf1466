// Package metrics holds ichor-controller's own Prometheus metrics (prefix
// ichor_), served by controller-runtime's metrics server with the manager's
// registry (metrics.Registry), behind authentication and authorization
// (ServerOptions).
//
// Two kinds:
//   - what the objects say — machines by phase and role, drift, operations by
//     phase, the lock holder, certificate expiry, discovery results — is a
//     Collector that lists Ichor's objects from the manager's cache at scrape
//     time (Collector), so it is right after a restart and costs nothing
//     between scrapes;
//   - what happens — Talos RPCs, operation completions, discovery scans — is
//     counted where it happens (the vectors below; the backup metrics live
//     in the etcdbackup package).
//
// Labels name objects by namespace and name, never a machine's UUID, an
// address or anything from a Secret. Every metric is listed, with its type,
// labels and meaning, in the README's metrics table; a test checks that the
// table and the scrape agree.
package metrics

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// Results of a completed operation.
const (
	ResultSucceeded = "Succeeded"
	ResultFailed    = "Failed"
)

// OperationTypes are the TalosOperation types, the bounded values of the
// type label; the completion metrics start at zero for each.
var OperationTypes = []string{
	ichorv1alpha1.OperationTalos, ichorv1alpha1.OperationKubernetes, ichorv1alpha1.OperationIchor,
	ichorv1alpha1.OperationCNI, ichorv1alpha1.OperationKubeProxy, ichorv1alpha1.OperationShutdown,
	ichorv1alpha1.OperationCARotation, ichorv1alpha1.OperationKeyRotation, ichorv1alpha1.OperationConfig,
	ichorv1alpha1.OperationNode, ichorv1alpha1.OperationEtcdRestore,
}

var (
	talosRPCs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ichor_talos_rpc_requests_total",
		Help: "Talos API calls the controller made, by gRPC method and status code (OK, Unavailable, PermissionDenied, ...).",
	}, []string{"method", "code"})
	talosRPCDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ichor_talos_rpc_duration_seconds",
		Help:    "Time a Talos API call took, by gRPC method (for a stream: until it ended).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"method"})
	operationsCompleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ichor_operations_completed_total",
		Help: "TalosOperations that ended, by type and result (Succeeded, Failed).",
	}, []string{labelType, "result"})
	operationDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ichor_operation_duration_seconds",
		Help:    "Time from an operation's start (it took the cluster lock) to its end, by type.",
		Buckets: []float64{30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800},
	}, []string{labelType})
	discoveryScanDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ichor_discovery_scan_duration_seconds",
		Help:    "Time a discovery scan of a cluster's subnets and addresses took, by TalosCluster.",
		Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
	}, []string{labelNamespace, labelCluster})
)

func init() { //nolint:gochecknoinits // metrics register with controller-runtime's registry once
	ctrlmetrics.Registry.MustRegister(talosRPCs, talosRPCDuration, operationsCompleted, operationDuration, discoveryScanDuration)

	// Each type's series exist from the start (zero), so that a rate or an
	// absence in a rule means what it says.
	for _, t := range OperationTypes {
		operationDuration.WithLabelValues(t)

		for _, r := range []string{ResultSucceeded, ResultFailed} {
			operationsCompleted.WithLabelValues(t, r)
		}
	}
}

// ObserveOperation records an operation that ended with result (Succeeded or
// Failed), after startedAt (zero when it never started: no duration).
func ObserveOperation(typ, result string, startedAt, completedAt time.Time) {
	operationsCompleted.WithLabelValues(typ, result).Inc()

	if !startedAt.IsZero() && !completedAt.Before(startedAt) {
		operationDuration.WithLabelValues(typ).Observe(completedAt.Sub(startedAt).Seconds())
	}
}

// ObserveDiscoveryScan records one scan of a cluster's subnets.
func ObserveDiscoveryScan(namespace, cluster string, d time.Duration) {
	discoveryScanDuration.WithLabelValues(namespace, cluster).Observe(d.Seconds())
}

// TalosInterceptors are the gRPC client interceptors that count and time
// every Talos API call; the controller installs them in contracts/pkg/talos
// (talos.SetInterceptors) at start.
func TalosInterceptors() talos.Interceptors {
	return talos.Interceptors{Unary: unaryInterceptor, Stream: streamInterceptor}
}

func unaryInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	observeRPC(method, err, time.Since(start))

	return err
}

func streamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	start := time.Now()

	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		observeRPC(method, err, time.Since(start))

		return nil, err
	}

	return &observedStream{ClientStream: s, method: method, start: start}, nil
}

// observedStream records its call when the stream ends: the first error
// RecvMsg returns (io.EOF is the normal end, code OK).
type observedStream struct {
	grpc.ClientStream

	method string
	start  time.Time
	done   bool
}

func (s *observedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil && !s.done {
		s.done = true

		if errors.Is(err, io.EOF) {
			observeRPC(s.method, nil, time.Since(s.start))
		} else {
			observeRPC(s.method, err, time.Since(s.start))
		}
	}

	return err
}

func observeRPC(method string, err error, d time.Duration) {
	talosRPCs.WithLabelValues(method, status.Code(err).String()).Inc()
	talosRPCDuration.WithLabelValues(method).Observe(d.Seconds())
}
