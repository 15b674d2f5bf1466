package talosemu

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Probes, as the kubelet's prober workers run them (k:pkg/kubelet/prober/worker.go): one
// worker per probe and run of a container; readiness and liveness wait for the startup probe;
// the first probe after initialDelaySeconds, then one every periodSeconds; successThreshold
// and failureThreshold consecutive results change the state. A failed liveness or startup
// probe stops the run (it restarts as restartPolicy says); readiness decides the container's
// ready and so the pod's Ready condition. httpGet (HTTP and HTTPS, certificates not
// verified, as the kubelet does), tcpSocket and grpc probes are run against the pod's
// loopback address; exec probes are not run and count as successes.

// startProbes starts the probe workers of the run that just started.
func (c *runCtr) startProbes(ctx context.Context) {
	started := make(chan struct{})

	if c.spec.StartupProbe == nil {
		close(started)
	} else {
		go c.probeWorker(ctx, "Startup", c.spec.StartupProbe, nil, func(ok bool) bool {
			if ok {
				c.mu.Lock()
				c.started = true
				c.mu.Unlock()
				close(started)
				c.p.poke()

				return true
			}

			c.setLiveKill("startup")

			return true
		})
	}

	if pr := c.spec.ReadinessProbe; pr != nil && !c.isInit {
		go c.probeWorker(ctx, "Readiness", pr, started, func(ok bool) bool {
			c.mu.Lock()
			changed := c.ready != ok
			c.ready = ok
			c.mu.Unlock()

			if changed {
				c.p.poke()
			}

			return false
		})
	}

	if pr := c.spec.LivenessProbe; pr != nil && !c.isInit {
		go c.probeWorker(ctx, "Liveness", pr, started, func(ok bool) bool {
			if ok {
				return false
			}

			c.setLiveKill("liveness")

			return true
		})
	}
}

func (c *runCtr) setLiveKill(why string) {
	c.mu.Lock()
	c.liveKill = why
	c.mu.Unlock()
	c.p.poke()
}

// probeWorker runs one probe until ctx ends or onChange returns true; onChange is called when
// the thresholds change the result (readiness starts as not ready, so a first success counts).
func (c *runCtr) probeWorker(ctx context.Context, kind string, pr *corev1.Probe, gate <-chan struct{}, onChange func(ok bool) bool) {
	if gate != nil {
		select {
		case <-ctx.Done():
			return
		case <-gate:
		}
	}

	if !sleepCtx(ctx, time.Duration(pr.InitialDelaySeconds)*time.Second) {
		return
	}

	period := time.Duration(max(pr.PeriodSeconds, 1)) * time.Second
	if pr.PeriodSeconds == 0 {
		period = 10 * time.Second
	}

	successNeeded, failuresNeeded := max(pr.SuccessThreshold, 1), pr.FailureThreshold
	if failuresNeeded <= 0 {
		failuresNeeded = 3
	}

	var (
		successes, failures int32
		result              *bool
	)

	for ctx.Err() == nil {
		ok, msg := c.probeOnce(ctx, pr)

		if ctx.Err() != nil {
			return
		}

		if ok {
			successes, failures = successes+1, 0
		} else {
			successes, failures = 0, failures+1

			if failures == 1 || failures == failuresNeeded {
				if pod, _ := c.p.current(); pod != nil {
					c.p.r.event(pod, corev1.EventTypeWarning, "Unhealthy", c.fieldPath(), kind+" probe failed: "+msg)
				}
			}
		}

		switch {
		case ok && successes >= successNeeded && (result == nil || !*result):
			result = new(true)

			if onChange(true) {
				return
			}
		case !ok && failures >= failuresNeeded && (result == nil || *result):
			result = new(false)

			if onChange(false) {
				return
			}
		}

		if !sleepCtx(ctx, period) {
			return
		}
	}
}

// probeOnce runs the probe once against the pod's loopback address.
func (c *runCtr) probeOnce(ctx context.Context, pr *corev1.Probe) (bool, string) {
	c.p.mu.Lock()
	host := c.p.loopback
	c.p.mu.Unlock()

	timeout := time.Duration(max(pr.TimeoutSeconds, 1)) * time.Second

	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	switch {
	case pr.HTTPGet != nil:
		return c.probeHTTP(pctx, pr.HTTPGet, host, timeout)
	case pr.TCPSocket != nil:
		port, err := c.probePort(pr.TCPSocket.Port)
		if err != nil {
			return false, err.Error()
		}

		c.p.r.m.world.recordInbound(host, port, PeerKubelet)

		conn, err := (&net.Dialer{}).DialContext(pctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false, err.Error()
		}

		_ = conn.Close()

		return true, ""
	case pr.GRPC != nil:
		service := ""
		if pr.GRPC.Service != nil {
			service = *pr.GRPC.Service
		}

		c.p.r.m.world.recordInbound(host, int(pr.GRPC.Port), PeerKubelet)

		return probeGRPC(pctx, net.JoinHostPort(host, strconv.Itoa(int(pr.GRPC.Port))), service)
	default:
		// exec probes are not run
		return true, ""
	}
}

func (c *runCtr) probeHTTP(ctx context.Context, g *corev1.HTTPGetAction, host string, timeout time.Duration) (bool, string) {
	port, err := c.probePort(g.Port)
	if err != nil {
		return false, err.Error()
	}

	scheme := strings.ToLower(string(corev1.URISchemeHTTP))
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = strings.ToLower(string(corev1.URISchemeHTTPS))
	}

	c.p.r.m.world.recordInbound(host, port, PeerKubelet)

	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: g.Path}
	if u.Path == "" {
		u.Path = "/"
	}

	if path, query, ok := strings.Cut(g.Path, "?"); ok {
		u.Path, u.RawQuery = path, query
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, err.Error()
	}

	req.Header.Set("User-Agent", "kube-probe/1.37")
	req.Header.Set("Accept", "*/*")

	for _, h := range g.HTTPHeaders {
		if h.Name == "Host" {
			req.Host = h.Value
		} else {
			req.Header.Add(h.Name, h.Value)
		}
	}

	hc := &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the kubelet's probes do not verify certificates
			DisableKeepAlives: true,
		},
	}

	resp, err := hc.Do(req)
	if err != nil {
		return false, err.Error()
	}

	_ = resp.Body.Close()

	if resp.StatusCode >= http.StatusOK && resp.StatusCode < http.StatusBadRequest {
		return true, ""
	}

	return false, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)
}

// probePort resolves a probe's port: a number, or the name of one of the container's ports.
func (c *runCtr) probePort(p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}

	for _, cp := range c.spec.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}

	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}

	return 0, fmt.Errorf("port %q is not a port of container %s", p.StrVal, c.spec.Name)
}

func probeGRPC(ctx context.Context, addr, service string) (bool, string) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false, err.Error()
	}
	defer conn.Close() //nolint:errcheck

	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return false, err.Error()
	}

	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return false, "service unhealthy (responded with \"" + resp.GetStatus().String() + "\")"
	}

	return true, ""
}
