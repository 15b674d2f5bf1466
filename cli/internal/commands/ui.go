package commands

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// uiService is the Service in front of ichor-ui in the install namespace.
const uiService = "ichor-ui"

func uiCommand() *cli.Command {
	return &cli.Command{
		Name: "ui",
		Usage: "open the web console: print its address, or port-forward to ichor-ui when it has none " +
			"(re-established when the pod goes away; Ctrl-C stops it)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "url", Usage: "ichor-ui's `URL`, when known (default: the address `ichor init --ui-url` recorded)"},
			&cli.StringFlag{Name: "install-namespace", Value: "ichor-system", Usage: "`NAMESPACE` Ichor is installed in"},
			&cli.StringFlag{Name: "address", Value: "127.0.0.1", Usage: "local `ADDRESS` of the port-forward"},
			&cli.IntFlag{Name: "port", Value: 8443, Usage: "local `PORT` of the port-forward (0 picks a free one)"},
		},
		Action: uiRun,
	}
}

func uiRun(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Present() {
		return fmt.Errorf("`%s` takes no arguments; run `%s --help`", cmd.FullName(), cmd.FullName())
	}
	r, err := connected(cmd)
	if err != nil {
		return err
	}
	u := cmd.String("url")
	if u == "" {
		if u, err = r.recordedUIURL(ctx); err != nil {
			return err
		}
	}
	if u != "" {
		// A URL on this machine's loopback is reached through this command's
		// port-forward on its port (`ichor init --ui-url https://127.0.0.1:8443`):
		// when nothing listens there yet, forward there.
		if port, ok := install.LoopbackUIURL(u); ok && !listening(ctx, u) {
			p, _ := strconv.Atoi(port)
			host, _ := url.Parse(u)
			return r.forwardUI(ctx, cmd.String("install-namespace"), host.Hostname(), p, strings.TrimSuffix(u, "/"))
		}
		return r.checkUI(ctx, u)
	}
	return r.forwardUI(ctx, cmd.String("install-namespace"), cmd.String("address"), cmd.Int("port"), "")
}

// listening reports whether something accepts connections at the URL's host and port.
func listening(ctx context.Context, u string) bool {
	parsed, err := url.Parse(u)
	if err != nil {
		return false
	}
	port := parsed.Port()
	if port == "" {
		port = "443"
	}
	c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", net.JoinHostPort(parsed.Hostname(), port))
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// recordedUIURL is the address `ichor init --ui-url` recorded on the
// IchorInstallation; "" when there is none.
func (r *run) recordedUIURL(ctx context.Context) (string, error) {
	inst := &ichorv1alpha1.IchorInstallation{}
	err := r.c().Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, inst)
	switch {
	case err == nil:
		return inst.Annotations[install.UIURLAnnotation], nil
	case apierrors.IsNotFound(err):
		return "", nil
	default:
		return "", r.conn.Explain(err, "reading the IchorInstallation")
	}
}

// checkUI asks ichor-ui at u whether it is ready and prints the address. The
// probe checks reachability only: it does not verify the certificate, which
// the browser does.
func (r *run) checkUI(ctx context.Context, u string) error {
	parsed, err := url.Parse(u)
	if err != nil || parsed.Scheme != "https" || parsed.Host == "" {
		return fmt.Errorf("ichor-ui's address %q is not an https URL such as https://ichor.example.com", u)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a reachability probe; see above
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, parsed.JoinPath("/readyz").String(), nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("ichor-ui at %s does not answer (%w); is it running, and is the address right (--url)?", u, rootCauseOf(err))
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ichor-ui at %s answers but is not ready (%s); try again in a moment", u, resp.Status)
	}
	r.printf("The web console is at %s\n", u)
	return nil
}

func rootCauseOf(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// forwardUI forwards address:port to a ready ichor-ui pod behind the Service,
// and to another one whenever the pod goes away, until ctx ends. shown is the
// address to print (ichor-ui's recorded URL); "" prints https://address:port.
func (r *run) forwardUI(ctx context.Context, ns, address string, port int, shown string) error {
	cs, err := kubernetes.NewForConfig(r.conn.Config)
	if err != nil {
		return err
	}
	svc, err := cs.CoreV1().Services(ns).Get(ctx, uiService, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) && shown != "" {
			return fmt.Errorf("nothing answers at ichor-ui's recorded address %s, and no Service %s in namespace %s to port-forward to: "+
				"is ichor-ui installed? Pass the install namespace with --install-namespace, or another address with --url", shown, uiService, ns)
		}
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("no Service %s in namespace %s, and no address recorded: is ichor-ui installed (ichorUI.enabled)? "+
				"Pass its address with --url, or the install namespace with --install-namespace", uiService, ns)
		}
		return r.conn.Explain(err, "reading Service "+ns+"/"+uiService)
	}
	if len(svc.Spec.Selector) == 0 || len(svc.Spec.Ports) == 0 {
		return fmt.Errorf("service %s/%s has no selector or no port: ichor-ui's Service is not as installed; reinstall it", ns, uiService)
	}
	target := svc.Spec.Ports[0].TargetPort
	if target.IntValue() == 0 && target.StrVal == "" {
		target = intstr.FromInt32(svc.Spec.Ports[0].Port)
	}
	// Listen first, so that the port is known (and stays the same) across re-forwards.
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(address, strconv.Itoa(port)))
	if err != nil {
		if shown != "" {
			return fmt.Errorf("local port %s:%d: %w; ichor-ui's recorded address %s needs this port: free it, or pass another address with --url", address, port, err, shown)
		}
		return fmt.Errorf("local port %s:%d: %w; pick another with --port", address, port, err)
	}
	local := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()

	printed := false
	for {
		pod, err := readyPod(ctx, cs, ns, svc.Spec.Selector)
		if err != nil {
			return r.conn.Explain(err, "listing ichor-ui pods in "+ns)
		}
		if pod == nil {
			r.warnf("no ready ichor-ui pod in %s yet; waiting", ns)
		} else if podPort, perr := containerPort(pod, target); perr != nil {
			r.warnf("pod %s: %v; waiting", pod.Name, perr)
		} else {
			ready := make(chan struct{})
			done := make(chan error, 1)
			stop := make(chan struct{})
			go func() { done <- r.portForward(cs, ns, pod.Name, address, local, podPort, stop, ready) }()
			// The connection to a kubelet outlives the pod behind it: a pod
			// that goes away ends the forward here, not at the next request.
			gone := make(chan string, 1)
			go func() { gone <- watchPod(ctx, cs, ns, pod.Name, stop) }()
			select {
			case <-ready:
				if !printed {
					if shown == "" {
						shown = "https://" + net.JoinHostPort(address, strconv.Itoa(local))
					}
					r.printf("The web console is at %s (forwarded to ichor-ui; Ctrl-C stops)\n", shown)
					printed = true
				}
				select {
				case err = <-done:
				case why := <-gone:
					close(stop)
					err = errors.Join(errors.New(why), <-done)
				case <-ctx.Done():
					close(stop)
					return r.endForward(done)
				}
			case err = <-done:
			case why := <-gone:
				close(stop)
				err = errors.Join(errors.New(why), <-done)
			case <-ctx.Done():
				close(stop)
				return r.endForward(done)
			}
			r.warnf("the forward to pod %s ended (%v); forwarding to another ichor-ui pod", pod.Name, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
}

// watchPod returns why the pod can no longer be forwarded to (deleted,
// being deleted, not ready), looking every 2 s until stop closes ("" then).
func watchPod(ctx context.Context, cs kubernetes.Interface, ns, name string, stop <-chan struct{}) string {
	for {
		select {
		case <-stop:
			return ""
		case <-ctx.Done():
			return ""
		case <-time.After(2 * time.Second):
		}
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return "the pod was deleted"
		case err != nil:
			continue // the API server may be briefly away; the forward decides
		case p.DeletionTimestamp != nil:
			return "the pod is being deleted"
		case !podReady(p):
			return "the pod is no longer ready"
		}
	}
}

// containerPort resolves a Service's target port (a number, or the name of
// a container port) in the pod.
func containerPort(p *corev1.Pod, target intstr.IntOrString) (int, error) {
	if target.Type == intstr.Int {
		return target.IntValue(), nil
	}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == target.StrVal {
				return int(cp.ContainerPort), nil
			}
		}
	}
	return 0, fmt.Errorf("no container port named %q (the Service %s's target port)", target.StrVal, uiService)
}

// endForward waits for a stopped port-forward to end; Ctrl-C is a normal end.
func (r *run) endForward(done <-chan error) error {
	if err := <-done; err != nil {
		r.warnf("the port-forward ended: %v", err)
	}
	return nil
}

// readyPod returns a running, ready pod matching selector, the newest
// first; nil when there is none.
func readyPod(ctx context.Context, cs kubernetes.Interface, ns string, selector map[string]string) (*corev1.Pod, error) {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(selector).String()})
	if err != nil {
		return nil, err
	}
	items := slices.Clone(pods.Items)
	slices.SortFunc(items, func(a, b corev1.Pod) int { return b.CreationTimestamp.Compare(a.CreationTimestamp.Time) })
	for i := range items {
		if p := &items[i]; p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) {
			return p, nil
		}
	}
	return nil, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// portForward forwards address:local to the pod's port until stop closes or
// the connection to the pod ends.
func (r *run) portForward(cs *kubernetes.Clientset, ns, pod, address string, local, target int, stop, ready chan struct{}) error {
	transport, upgrader, err := spdy.RoundTripperFor(r.conn.Config)
	if err != nil {
		return err
	}
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	fw, err := portforward.NewOnAddresses(dialer, []string{address}, []string{fmt.Sprintf("%d:%d", local, target)}, stop, ready, io.Discard, r.errOut)
	if err != nil {
		return err
	}
	return fw.ForwardPorts()
}
