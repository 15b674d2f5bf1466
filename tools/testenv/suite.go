package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// LogEnv names the variable that shows the controllers' logs in tests.
const LogEnv = "ICHOR_TEST_LOG"

// Suite is what the tests of a package share: one API server, the scheme of
// client-go's and Ichor's types, and a temporary directory.
type Suite struct {
	Env    *Env
	Scheme *runtime.Scheme
	Dir    string
}

// SuiteOptions configure Main.
type SuiteOptions struct {
	// Env are the API server's options; its Scheme is the suite's.
	Env Options
	// LogTo receives the controllers' logs; nil discards them unless
	// ICHOR_TEST_LOG is set, which prints them.
	LogTo io.Writer
}

// Main is a package's TestMain body: it starts the API server (a missing one
// is a failure, never a skip), makes the temporary directory, runs setup (its
// cleanup runs after the tests), runs the tests, stops everything and returns
// the exit code.
func Main(m *testing.M, opts SuiteOptions, setup func(ctx context.Context, s *Suite) (cleanup func(), err error)) int {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}

	if err := ichorv1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}

	switch {
	case opts.LogTo != nil:
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(opts.LogTo)))
	case os.Getenv(LogEnv) != "":
		ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	default:
		ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	}

	opts.Env.Scheme = scheme

	env, err := Start(opts.Env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: cannot start the test API server: %v\n", err)

		return 1
	}

	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the test API server: %v\n", err)
		}
	}()

	dir, err := os.MkdirTemp("", "ichor-test-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)

		return 1
	}

	defer func() { _ = os.RemoveAll(dir) }()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cleanup, err := setup(ctx, &Suite{Env: env, Scheme: scheme, Dir: dir})
	if cleanup != nil {
		defer cleanup()
	}

	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)

		return 1
	}

	return m.Run()
}

// NewManager returns a controller manager on the suite's API server, with
// the metrics and health endpoints off.
func (s *Suite) NewManager() (ctrl.Manager, error) {
	return ctrl.NewManager(s.Env.Config, ctrl.Options{
		Scheme:                 s.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
}

// StartManager starts mgr until ctx ends and waits for its cache.
func StartManager(ctx context.Context, mgr ctrl.Manager) error {
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		}
	}()

	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("the manager's cache did not sync")
	}

	return nil
}
