package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
)

// clusterCheckInterval is how often ichor-ui looks at the TalosClusters of
// its namespace when --cluster is empty (a variable for the tests).
var clusterCheckInterval = 5 * time.Second

// onlyCluster returns the name of the only TalosCluster of ns, or why there
// is none to serve.
func onlyCluster(ctx context.Context, r client.Reader, ns string) (string, error) {
	list := &ichorv1alpha1.TalosClusterList{}
	if err := r.List(ctx, list, client.InNamespace(ns)); err != nil {
		return "", fmt.Errorf("listing the TalosClusters of namespace %s: %w", ns, err)
	}
	var names []string
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			names = append(names, list.Items[i].Name)
		}
	}
	switch len(names) {
	case 1:
		return names[0], nil
	case 0:
		return "", fmt.Errorf("no TalosCluster in namespace %s yet: create one, or pass --cluster", ns)
	default:
		return "", fmt.Errorf("%d TalosClusters in namespace %s (%s): pass --cluster to choose the one to serve", len(names), ns, strings.Join(names, ", "))
	}
}

// waitForCluster serves /healthz (ok) and 503 for everything else, /readyz
// included, on addr until ns holds exactly one TalosCluster, and returns its
// name. It logs each new reason to wait once.
func waitForCluster(ctx context.Context, r client.Reader, ns, addr string, getCert getCertificate, log *slog.Logger) (string, error) {
	var reason atomic.Pointer[string]
	waiting := "waiting for the cache"
	reason.Store(&waiting)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "ichor-ui is not ready: "+*reason.Load()+"\n", http.StatusServiceUnavailable)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert},
		ErrorLog:  slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	last := ""
	t := time.NewTicker(clusterCheckInterval)
	defer t.Stop()
	for {
		name, err := onlyCluster(ctx, r, ns)
		if err == nil {
			return name, nil
		}
		msg := err.Error()
		reason.Store(&msg)
		if msg != last {
			log.Warn("ichor-ui is not ready: it serves the only TalosCluster of its namespace", "reason", msg)
			last = msg
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case err := <-errc:
			if !errors.Is(err, http.ErrServerClosed) {
				return "", err
			}
		case <-t.C:
		}
	}
}

// clusterWatch keeps checking, when --cluster is empty, that the cluster
// ichor-ui serves is still the only one of its namespace: Ready is false
// otherwise (with one log line per change), and when another cluster has
// become the only one it calls restart, so that ichor-ui starts again to
// serve it.
type clusterWatch struct {
	reader  client.Reader
	ns      string
	serving string
	log     *slog.Logger
	ok      atomic.Bool
	restart func(reason string)
}

func (c *clusterWatch) run(ctx context.Context) {
	if c == nil {
		return // --cluster given: nothing to watch
	}
	last := ""
	t := time.NewTicker(clusterCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		name, err := onlyCluster(ctx, c.reader, c.ns)
		msg := ""
		switch {
		case err != nil:
			msg = err.Error()
		case name != c.serving:
			c.ok.Store(false)
			c.restart(fmt.Sprintf("TalosCluster %s, which ichor-ui served, is gone and %s is now the only one of namespace %s: restarting to serve it", c.serving, name, c.ns))
			return
		}
		c.ok.Store(msg == "")
		if msg != last {
			if msg != "" {
				log := c.log.With("serving", c.serving)
				log.Warn("ichor-ui is not ready: it serves the only TalosCluster of its namespace", "reason", msg)
			} else {
				c.log.Info("ichor-ui is ready again", "cluster", c.serving)
			}
			last = msg
		}
	}
}

// Ready reports whether the served cluster is the only one.
func (c *clusterWatch) Ready() bool { return c == nil || c.ok.Load() }

// clusterToServe returns the TalosCluster to serve: --cluster when given,
// else the only one of ns once there is one (waitForCluster), with the watch
// that keeps checking it (its run is main's loop; nil with --cluster);
// restart is called when another cluster replaces it.
func clusterToServe(ctx context.Context, flagCluster string, r client.Reader, ns, addr string, getCert getCertificate,
	log *slog.Logger, restart func(reason string),
) (string, *clusterWatch, error) {
	if flagCluster != "" {
		return flagCluster, nil, nil
	}
	name, err := waitForCluster(ctx, r, ns, addr, getCert, log)
	if err != nil {
		return "", nil, err
	}
	log.Info("serving the only TalosCluster of the namespace", "cluster", name, "namespace", ns)
	w := &clusterWatch{reader: r, ns: ns, serving: name, log: log, restart: restart}
	w.ok.Store(true)
	return name, w, nil
}
