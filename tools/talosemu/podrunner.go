package talosemu

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/kwok/pkg/apis/internalversion"
)

// The pod runner: the part of a kubelet that runs Ichor's own images. A pod bound to this
// machine's Node whose container image is one of Ichor's runs as local processes of the
// binaries of Options.PodBinDir, with the pod's command, args, env, volumes and ServiceAccount
// token; its status (phase, conditions, container states, restart counts, addresses) is
// written with the kubelet's identity as a kubelet writes it; its logs and port-forwards are
// served through the kubelet API (kubeletserver.go). kwok simulates every other pod
// (kwok.go). README.md, "Pods of Ichor's images", lists the differences from a kubelet.

// kindPod is the Pod kind in object references.
const kindPod = "Pod"

// ichorImages are the repositories (last path element) whose pods the runner runs; each
// names its binary in Options.PodBinDir.
var ichorImages = []string{"ichor-controller", "ichor-installer", "ichor-ui"}

// ichorBinary is the binary an image runs: the last path element of its repository when it is
// one of ichorImages (any registry, tag or digest), else "".
func ichorBinary(image string) string {
	ref, _, _ := strings.Cut(image, "@")
	last := ref[strings.LastIndex(ref, "/")+1:]
	last, _, _ = strings.Cut(last, ":")

	if slices.Contains(ichorImages, last) {
		return last
	}

	return ""
}

// digestPattern is an image digest as a registry names a manifest: sha256 and 64 hex digits.
var digestPattern = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// imageBinary is the file a container of an Ichor image runs, and what is wrong with the
// image's name when it cannot run. An image named by tag runs PodBinDir/<binary>: the build
// of this tree. An image named by digest (repository@sha256:HEX) runs
// PodBinDir/sha256/HEX/<binary>: the build of that very image, which a world holding images
// of several Ichor versions in a registry writes there per digest (the digest is the image,
// so no other build may stand in for it); a digest of another form cannot run.
func (w *World) imageBinary(image, binary string) (string, error) {
	_, digest, ok := strings.Cut(image, "@")
	if !ok {
		return filepath.Join(w.podBinDir, binary), nil
	}

	if !digestPattern.MatchString(digest) {
		return "", fmt.Errorf("talosemu: image %q names a digest that is not sha256:<64 lowercase hex digits>", image)
	}

	algorithm, hex, _ := strings.Cut(digest, ":")

	return filepath.Join(w.podBinDir, algorithm, hex, binary), nil
}

// runsLocally is true for a pod with a container or init container of an Ichor image.
func runsLocally(pod *corev1.Pod) bool {
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		if ichorBinary(c.Image) != "" {
			return true
		}
	}

	return false
}

// kwokRunnerPodsQuery is the image names of a pod's containers, as ichorBinary reads them, in
// the JQ kwok evaluates its stage selectors with (sigs.k8s.io/kwok/pkg/utils/expression).
const kwokRunnerPodsQuery = `(.spec.containers + (.spec.initContainers // []))[].image | sub("@.*$"; "") | split("/") | last | split(":") | first`

// excludeRunnerPods makes a kwok pod stage skip the pods the runner runs.
func excludeRunnerPods(st *internalversion.Stage) {
	if st.Spec.Selector == nil {
		st.Spec.Selector = &internalversion.StageSelector{}
	}

	st.Spec.Selector.MatchExpressions = append(st.Spec.Selector.MatchExpressions, internalversion.MatchExpression{
		JQ: &internalversion.SelectorJQ{Key: kwokRunnerPodsQuery, Operator: internalversion.SelectorOpNotIn, Values: ichorImages},
	})
}

// podRunner runs the Ichor pods of one machine while its kubelet runs.
type podRunner struct {
	m      *Machine
	c      *kubernetes.Clientset // the kubelet's identity
	watch  *kubernetes.Clientset // the same, without a request timeout, for the pod watch
	node   string
	dir    string
	lister listersv1.PodLister

	// apiWanted is closed when the runner takes its first pod: the kubelet
	// API serves the logs and port-forwards of the pods it runs, so it
	// listens from then on (a socket per node that runs none made a world
	// of 5,000 nodes run out of file descriptors).
	apiWanted chan struct{}
	wantAPI   sync.Once

	mu   sync.Mutex
	pods map[types.UID]*runPod
	done map[types.UID]bool // pods whose deletion this runner confirmed
	wg   sync.WaitGroup
	ctx  context.Context //nolint:containedctx // the runner's lifetime, for the workers it starts
}

// startPodRunner starts, with Options.PodBinDir, the pod runner, and the kubelet API
// (kubeletserver.go) once the runner takes its first pod; the returned function stops both
// and the pods' processes (the machine goes down).
func (m *Machine) startPodRunner(ctx context.Context, c *kubelets) func() {
	ctx, cancel := context.WithCancel(ctx)

	r := &podRunner{
		m: m, c: c.requests, watch: c.watches, node: m.nodeName(), dir: filepath.Join(m.dir, "pods"), apiWanted: make(chan struct{}),
		pods: map[types.UID]*runPod{}, done: map[types.UID]bool{}, ctx: ctx,
	}

	m.world.netMu.Lock()
	m.world.runners[m] = r
	m.world.netMu.Unlock()

	var wg sync.WaitGroup

	wg.Add(1)

	go func() {
		defer wg.Done()

		select {
		case <-r.apiWanted:
			r.serveKubeletAPI(ctx)
		case <-ctx.Done():
		}
	}()

	if m.world.podBinDir != "" {
		wg.Add(1)

		go func() {
			defer wg.Done()

			if err := r.run(ctx); err != nil && ctx.Err() == nil {
				m.world.logf("machine %s: pod runner: %v", m.Name(), err)
			}
		}()
	}

	return func() {
		cancel()
		wg.Wait()

		m.world.netMu.Lock()
		if m.world.runners[m] == r {
			delete(m.world.runners, m)
		}
		m.world.netMu.Unlock()
	}
}

// run watches the pods bound to this Node (as the kubelet does, a watch with the field
// selector spec.nodeName) and keeps one worker per pod it runs until ctx ends; then every
// worker stops its processes.
func (r *podRunner) run(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(r.watch, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + r.node
	}))

	inf := f.Core().V1().Pods()
	r.lister = inf.Lister()

	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(obj, false) },
		UpdateFunc: func(_, obj any) { r.observe(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}

			r.observe(obj, true)
		},
	})
	if err != nil {
		return err
	}

	f.Start(ctx.Done())

	<-ctx.Done()

	f.Shutdown()
	r.wg.Wait()

	return nil
}

// observe hands a pod event to the pod's worker, starting one for a new pod.
func (r *podRunner) observe(obj any, gone bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || !runsLocally(pod) || pod.Spec.NodeName != r.node {
		return
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	if r.ctx.Err() != nil || r.done[pod.UID] {
		return
	}

	p := r.pods[pod.UID]
	if p == nil {
		if gone {
			return
		}

		r.wantAPI.Do(func() { close(r.apiWanted) })

		p = newRunPod(r, pod)
		r.pods[pod.UID] = p
		r.wg.Add(1)

		go p.run(r.ctx)
	}

	p.update(pod, gone)
}

// forget drops a worker that ended; finished: the pod is deleted, later events of it (the
// watch may still deliver its last versions) start no new worker.
func (r *podRunner) forget(p *runPod, finished bool) {
	r.mu.Lock()
	defer r.mu.Unlock()

	if r.pods[p.uid] == p {
		delete(r.pods, p.uid)
	}

	if finished {
		r.done[p.uid] = true
	}
}

// lookup finds the pod ns/name this runner runs (the newest if a name was reused).
func (r *podRunner) lookup(ns, name string) *runPod {
	r.mu.Lock()
	defer r.mu.Unlock()

	var found *runPod

	for _, p := range r.pods {
		if p.ns == ns && p.name == name && (found == nil || p.created.After(found.created)) {
			found = p
		}
	}

	return found
}

// downGrace is how long the processes get when the machine goes down: none when its power is
// cut, else at most 10 s (Talos stops the pods before a reboot or shutdown).
func (r *podRunner) downGrace(podGrace time.Duration) time.Duration {
	if !r.m.Powered() {
		return 0
	}

	return min(podGrace, 10*time.Second)
}

// podGrace is the pod's terminationGracePeriodSeconds (default 30 s).
func podGrace(pod *corev1.Pod) time.Duration {
	if pod != nil && pod.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}

	return 30 * time.Second
}

// allocPodIP picks the pod's address: the Node's for hostNetwork pods, else an address of the
// Node's podCIDR no other pod of the Node has, counted down from the top of the range (kwok
// gives its pods addresses counted up from the bottom), keeping the one the pod had if it is
// still free. It returns the pod address and the loopback address its processes listen on.
func (r *podRunner) allocPodIP(ctx context.Context, pod *corev1.Pod) (podIP, loopback string, err error) {
	if pod.Spec.HostNetwork {
		return r.m.IP(), r.m.IP(), nil
	}

	node, err := r.c.CoreV1().Nodes().Get(ctx, r.node, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}

	if node.Spec.PodCIDR == "" {
		return "", "", errors.New("the Node has no podCIDR yet")
	}

	cidr, err := netip.ParsePrefix(node.Spec.PodCIDR)
	if err != nil {
		return "", "", fmt.Errorf("podCIDR %q: %w", node.Spec.PodCIDR, err)
	}

	cidr = cidr.Masked()

	used := map[string]bool{}

	if pods, err := r.lister.List(labels.Everything()); err == nil {
		for _, o := range pods {
			if o.UID != pod.UID && o.Status.Phase != corev1.PodSucceeded && o.Status.Phase != corev1.PodFailed {
				used[o.Status.PodIP] = true
			}
		}
	}

	candidates := []netip.Addr{}

	if a, err := netip.ParseAddr(pod.Status.PodIP); err == nil && cidr.Contains(a) {
		candidates = append(candidates, a)
	}

	last := lastAddr(cidr)
	for a, n := last.Prev(), 0; cidr.Contains(a) && a != cidr.Addr() && n < 4096; a, n = a.Prev(), n+1 {
		candidates = append(candidates, a)
	}

	for _, a := range candidates {
		s := a.String()
		if used[s] {
			continue
		}

		l, err := r.m.world.allocLoopback(s)
		if errors.Is(err, errPodIPTaken) {
			continue
		}

		if err != nil {
			return "", "", err
		}

		return s, l, nil
	}

	return "", "", fmt.Errorf("podCIDR %s has no free address", cidr)
}

// lastAddr is the last address of an IPv4 or IPv6 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	bits := p.Bits()

	for i := range b {
		for j := range 8 {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}

	a, _ := netip.AddrFromSlice(b)

	return a
}

// event records a core/v1 Event about the pod from this kubelet, as the kubelet's recorder
// does (source component kubelet, host the Node); failures are ignored.
func (r *podRunner) event(pod *corev1.Pod, typ, reason, fieldPath, msg string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{
			Kind: kindPod, APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, FieldPath: fieldPath,
		},
		Reason: reason, Message: msg, Type: typ, Count: 1,
		Source:         corev1.EventSource{Component: "kubelet", Host: r.node},
		FirstTimestamp: now, LastTimestamp: now,
		ReportingController: "kubelet", ReportingInstance: r.node,
	}

	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 5*time.Second)
	defer cancel()

	_, _ = r.c.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{})
}

// deletePod confirms a graceful deletion once the processes stopped, as the kubelet's status
// manager does: a delete with grace period 0 and the pod's UID as precondition.
func (r *podRunner) deletePod(ctx context.Context, pod *corev1.Pod) error {
	err := r.c.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64(0)),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}

	return err
}

// podDir is the pod's directory on the machine: volumes, logs, the process's temp and home.
func (r *podRunner) podDir(pod *corev1.Pod) string {
	return filepath.Join(r.dir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
}

// removeDir deletes a pod's directory once the pod is gone.
func removeDir(dir string) {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}
