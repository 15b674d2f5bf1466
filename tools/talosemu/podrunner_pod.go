package talosemu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Container backoff, as the kubelet's: the first restart is immediate, then 10 s doubling up
// to 5 min; a container that ran 10 min resets it
// (k:pkg/kubelet/kubelet.go backOffPeriod, MaxContainerBackOff).
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 300 * time.Second
	backoffReset   = 10 * time.Minute
	// volumeResync is how often ConfigMap, Secret and downward API volumes are rewritten
	// (the kubelet's sync frequency, 1 min).
	volumeResync = time.Minute
)

// runPod is one pod the runner runs; its worker goroutine (run) owns its lifecycle.
type runPod struct {
	r       *podRunner
	uid     types.UID
	ns      string
	name    string
	created time.Time
	kick    chan struct{}

	mu       sync.Mutex
	pod      *corev1.Pod // the newest version seen
	gone     bool        // the pod object is deleted
	dir      string
	podIP    string // status.podIP (the Node's podCIDR; hostNetwork: the Node's address)
	loopback string // the address its processes listen on
	sandbox  bool   // addresses and volumes are ready
	waitWhy  string // why the sandbox is not ready (ContainerCreating's message)
	started  time.Time
	inits    []*runCtr
	ctrs     []*runCtr
	phase    corev1.PodPhase // Succeeded/Failed once it ended; "" before
	fromAPI  bool            // it had ended before this runner saw it: nothing to run
	volsAt   time.Time
	tokens   map[string]*saToken // projected ServiceAccount tokens by volume/path
	sentFor  *corev1.PodStatus   // the status last written and what the API server stored of it
	stored   *corev1.PodStatus
	mountErr string // the last FailedMount Event's message and when it was recorded
	mountAt  time.Time
}

func newRunPod(r *podRunner, pod *corev1.Pod) *runPod {
	p := &runPod{
		r: r, uid: pod.UID, ns: pod.Namespace, name: pod.Name, created: time.Now(),
		kick: make(chan struct{}, 1), dir: r.podDir(pod), tokens: map[string]*saToken{}, pod: pod,
	}

	prev := map[string]corev1.ContainerStatus{}
	for _, s := range slices2(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		prev[s.Name] = s
	}

	for i := range pod.Spec.InitContainers {
		p.inits = append(p.inits, newRunCtr(p, &pod.Spec.InitContainers[i], true, prev))
	}

	for i := range pod.Spec.Containers {
		p.ctrs = append(p.ctrs, newRunCtr(p, &pod.Spec.Containers[i], false, prev))
	}

	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		p.phase, p.fromAPI = pod.Status.Phase, true
	}

	return p
}

func slices2[T any](a, b []T) []T { return append(append([]T{}, a...), b...) }

// update records a newer version of the pod (or its deletion) and wakes the worker.
func (p *runPod) update(pod *corev1.Pod, gone bool) {
	p.mu.Lock()
	p.pod = pod
	p.gone = p.gone || gone
	p.mu.Unlock()

	p.poke()
}

func (p *runPod) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *runPod) current() (*corev1.Pod, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()

	return p.pod, p.gone
}

// run is the pod's worker: it reacts to pod updates, process exits and probe results, and
// re-checks every second.
func (p *runPod) run(ctx context.Context) {
	defer p.r.wg.Done()

	t := time.NewTicker(time.Second)
	defer t.Stop()

	for {
		if p.sync(ctx) {
			p.r.forget(p, true)

			return
		}

		select {
		case <-ctx.Done():
			// the machine goes down: the processes stop, the pod object stays
			pod, _ := p.current()
			p.stopAll(p.r.downGrace(podGrace(pod)), "")
			p.teardown()
			p.r.forget(p, false)

			return
		case <-p.kick:
		case <-t.C:
		}
	}
}

// sync does one round of the pod's lifecycle; true when the worker is done.
func (p *runPod) sync(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}

	pod, gone := p.current()

	switch {
	case gone:
		// deleted without the kubelet's confirmation (a force delete): stop and forget
		p.stopAll(podGrace(pod), "Killing")
		p.teardown()
		removeDir(p.dir)

		return true
	case pod.DeletionTimestamp != nil:
		grace := podGrace(pod)
		if pod.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		}

		p.stopAll(grace, "Killing")
		p.endPhase()
		p.syncStatus(ctx, pod)
		p.teardown()

		if err := p.r.deletePod(ctx, pod); err != nil {
			p.r.m.world.logf("machine %s: deleting pod %s/%s: %v", p.r.m.Name(), p.ns, p.name, err)

			return false
		}

		removeDir(p.dir)

		return true
	}

	if p.ended() {
		p.syncStatus(ctx, pod)

		return false
	}

	if !p.hasSandbox() {
		if err := p.setupSandbox(ctx, pod); err != nil {
			p.setWait(err.Error())
			p.syncStatus(ctx, pod)

			return false
		}
	}

	p.refresh(ctx, pod)
	p.step(ctx, pod)
	p.syncStatus(ctx, pod)

	if p.ended() {
		// a pod that ran to completion gives its addresses back; its logs stay until it is deleted
		p.teardown()
	}

	return false
}

func (p *runPod) ended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()

	return p.phase != ""
}

func (p *runPod) hasSandbox() bool {
	p.mu.Lock()
	defer p.mu.Unlock()

	return p.sandbox
}

func (p *runPod) setWait(why string) {
	p.mu.Lock()
	p.waitWhy = why
	p.mu.Unlock()
}

// setupSandbox gives the pod its addresses and writes its volumes.
func (p *runPod) setupSandbox(ctx context.Context, pod *corev1.Pod) error {
	for _, d := range []string{"volumes", "logs", "tmp", "home", "work"} {
		if err := os.MkdirAll(filepath.Join(p.dir, d), stateDirFileMode); err != nil {
			return err
		}
	}

	p.mu.Lock()
	haveIP := p.loopback != ""
	p.mu.Unlock()

	if !haveIP {
		podIP, loopback, err := p.r.allocPodIP(ctx, pod)
		if err != nil {
			return fmt.Errorf("pod address: %w", err)
		}

		p.mu.Lock()
		p.podIP, p.loopback = podIP, loopback
		p.mu.Unlock()
	}

	if err := p.writeVolumes(ctx, pod); err != nil {
		// one Event per message and half minute (the kubelet retries with a backoff)
		p.mu.Lock()
		record := err.Error() != p.mountErr || time.Since(p.mountAt) > 30*time.Second
		if record {
			p.mountErr, p.mountAt = err.Error(), time.Now()
		}
		p.mu.Unlock()

		if record {
			p.r.event(pod, corev1.EventTypeWarning, "FailedMount", "", err.Error())
		}

		return err
	}

	p.mu.Lock()
	p.sandbox, p.waitWhy, p.volsAt = true, "", time.Now()

	if p.started.IsZero() {
		p.started = time.Now()
	}
	p.mu.Unlock()

	return nil
}

// refresh renews the ServiceAccount tokens that are due and rewrites the other volumes once
// a minute, as the kubelet does.
func (p *runPod) refresh(ctx context.Context, pod *corev1.Pod) {
	p.mu.Lock()
	due := time.Since(p.volsAt) >= volumeResync
	p.mu.Unlock()

	if !due && !p.tokenDue() {
		return
	}

	if err := p.writeVolumes(ctx, pod); err != nil {
		p.r.m.world.logf("machine %s: pod %s/%s: volumes: %v", p.r.m.Name(), p.ns, p.name, err)

		return
	}

	p.mu.Lock()
	p.volsAt = time.Now()
	p.mu.Unlock()
}

// teardown releases the pod's addresses and stops its probes (its processes have stopped).
func (p *runPod) teardown() {
	p.mu.Lock()
	podIP, loopback := p.podIP, p.loopback
	hostNet := p.pod != nil && p.pod.Spec.HostNetwork
	p.sandbox = false
	p.mu.Unlock()

	if loopback != "" && !hostNet {
		p.r.m.world.releaseLoopback(podIP, loopback)
	}

	p.mu.Lock()
	p.loopback = ""
	p.mu.Unlock()
}

// step starts the containers that are due and decides restarts, as the kubelet's
// computePodActions does: init containers one after the other, then every container; a
// container that exited restarts as restartPolicy says, after its backoff.
func (p *runPod) step(ctx context.Context, pod *corev1.Pod) {
	policy := pod.Spec.RestartPolicy

	// init containers, in order
	for _, c := range p.inits {
		c.reapLiveness()

		st := c.snapshot()

		switch {
		case st.running:
			return
		case st.exited && st.exitCode == 0:
			continue
		case st.exited && policy == corev1.RestartPolicyNever:
			p.setPhase(corev1.PodFailed)

			return
		case st.exited && time.Now().Before(st.nextStart):
			return
		}

		c.start(ctx, pod)

		return
	}

	// the containers
	for _, c := range p.ctrs {
		c.reapLiveness()

		st := c.snapshot()
		if st.running {
			continue
		}

		if st.exited && !restarts(policy, st.exitCode) {
			continue
		}

		if st.exited && time.Now().Before(st.nextStart) {
			continue
		}

		c.start(ctx, pod)
	}

	// all done: the pod ends
	allDone, failed := true, false

	for _, c := range p.ctrs {
		st := c.snapshot()
		if !st.exited || restarts(policy, st.exitCode) {
			allDone = false
		}

		if st.exited && st.exitCode != 0 {
			failed = true
		}
	}

	if allDone && len(p.ctrs) > 0 {
		if failed {
			p.setPhase(corev1.PodFailed)
		} else {
			p.setPhase(corev1.PodSucceeded)
		}
	}
}

// restarts is whether a container that exited with code restarts under policy.
func restarts(policy corev1.RestartPolicy, code int32) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	default:
		return true
	}
}

func (p *runPod) setPhase(ph corev1.PodPhase) {
	p.mu.Lock()
	defer p.mu.Unlock()

	if p.phase == "" {
		p.phase = ph
	}
}

// endPhase sets the phase of a pod whose processes were stopped for its deletion: Succeeded
// when every container exited 0, else Failed (the kubelet sets a terminal phase before it
// confirms a deletion).
func (p *runPod) endPhase() {
	failed := false

	for _, c := range p.ctrs {
		st := c.snapshot()
		if !st.exited || st.exitCode != 0 {
			failed = true
		}
	}

	if failed {
		p.setPhase(corev1.PodFailed)
	} else {
		p.setPhase(corev1.PodSucceeded)
	}
}

// stopAll stops every running container: SIGTERM, then SIGKILL after grace (0: SIGKILL at
// once), all at the same time. reason, when set, is the Event recorded for each.
func (p *runPod) stopAll(grace time.Duration, reason string) {
	var wg sync.WaitGroup

	for _, c := range slices2(p.inits, p.ctrs) {
		if !c.snapshot().running {
			continue
		}

		wg.Add(1)

		go func() {
			defer wg.Done()

			if pod, _ := p.current(); reason != "" && pod != nil {
				p.r.event(pod, corev1.EventTypeNormal, reason, c.fieldPath(), "Stopping container "+c.spec.Name)
			}

			c.stop(grace)
		}()
	}

	wg.Wait()
}

// kubelet-owned pod conditions (k:pkg/kubelet/status/generate.go and status_manager.go).
var kubeletConditions = map[corev1.PodConditionType]bool{
	corev1.PodReadyToStartContainers: true, corev1.PodInitialized: true,
	corev1.ContainersReady: true, corev1.PodReady: true,
}

// status computes the pod's status from the processes, keeping the fields and conditions the
// kubelet does not own.
//
//nolint:gocyclo,cyclop
func (p *runPod) status(pod *corev1.Pod) corev1.PodStatus {
	p.mu.Lock()
	phase, sandbox, waitWhy, podIP, started := p.phase, p.sandbox, p.waitWhy, p.podIP, p.started
	p.mu.Unlock()

	st := *pod.Status.DeepCopy()

	st.HostIP, st.HostIPs = p.r.m.IP(), []corev1.HostIP{{IP: p.r.m.IP()}}

	if podIP != "" {
		st.PodIP, st.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
	}

	if st.StartTime == nil && !started.IsZero() {
		st.StartTime = &metav1.Time{Time: started.UTC().Truncate(time.Second)}
	}

	st.InitContainerStatuses = nil
	for _, c := range p.inits {
		st.InitContainerStatuses = append(st.InitContainerStatuses, c.apiStatus(waitWhy))
	}

	st.ContainerStatuses = nil
	for _, c := range p.ctrs {
		st.ContainerStatuses = append(st.ContainerStatuses, c.apiStatus(waitWhy))
	}

	initDone := true
	for _, c := range p.inits {
		if s := c.snapshot(); !s.exited || s.exitCode != 0 {
			initDone = false
		}
	}

	running, allReady := false, len(p.ctrs) > 0
	for _, c := range p.ctrs {
		s := c.snapshot()
		running = running || s.running || (s.exited && restarts(pod.Spec.RestartPolicy, s.exitCode))

		if !s.running || !s.ready {
			allReady = false
		}
	}

	switch {
	case phase != "":
		st.Phase = phase
	case running && initDone:
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}

	if phase != "" {
		allReady = false
	}

	gatesOK := true

	for _, g := range pod.Spec.ReadinessGates {
		ok := false

		for _, c := range pod.Status.Conditions {
			if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
				ok = true
			}
		}

		gatesOK = gatesOK && ok
	}

	cond := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s, reason = corev1.ConditionTrue, ""
		}

		return corev1.PodCondition{Type: t, Status: s, Reason: reason}
	}

	notReady := "ContainersNotReady"
	if phase != "" {
		notReady = "PodCompleted"
	}

	conds := []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, sandbox, ""),
		cond(corev1.PodInitialized, initDone, "ContainersNotInitialized"),
		cond(corev1.ContainersReady, allReady, notReady),
		cond(corev1.PodReady, allReady && gatesOK, notReady),
	}

	if allReady && !gatesOK {
		conds[3].Reason = "ReadinessGatesNotReady"
	}

	now := metav1.NewTime(time.Now().Truncate(time.Second))
	out := []corev1.PodCondition{}

	for _, c := range pod.Status.Conditions {
		if !kubeletConditions[c.Type] {
			out = append(out, c)
		}
	}

	for _, c := range conds {
		c.LastTransitionTime = now

		for _, old := range pod.Status.Conditions {
			if old.Type == c.Type && old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}

		out = append(out, c)
	}

	st.Conditions = out

	return st
}

// syncStatus writes the pod's status with the kubelet's identity when it changed.
func (p *runPod) syncStatus(ctx context.Context, pod *corev1.Pod) {
	p.mu.Lock()
	fromAPI := p.fromAPI
	p.mu.Unlock()

	if fromAPI {
		// it ended before this runner saw it: its status stays as it is
		return
	}

	st := p.status(pod)
	if equality.Semantic.DeepEqual(pod.Status, st) {
		return
	}

	// the API server may store a status a little differently from what was sent (times in
	// seconds, fields of disabled features dropped): unchanged is also "sent this, and the
	// pod still has what was stored of it"
	p.mu.Lock()
	same := p.sentFor != nil && equality.Semantic.DeepEqual(*p.sentFor, st) && equality.Semantic.DeepEqual(*p.stored, pod.Status)
	p.mu.Unlock()

	if same {
		return
	}

	upd := pod.DeepCopy()
	upd.Status = st

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()

	got, err := p.r.c.CoreV1().Pods(pod.Namespace).UpdateStatus(wctx, upd, metav1.UpdateOptions{})
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			p.r.m.world.logf("machine %s: status of pod %s/%s: %v", p.r.m.Name(), p.ns, p.name, err)
		}

		return
	}

	p.mu.Lock()
	p.sentFor, p.stored = &st, &got.Status
	if p.pod != nil && p.pod.ResourceVersion == pod.ResourceVersion {
		p.pod = got
	}
	p.mu.Unlock()
}

// containerID is the runtime ID shown in a container status for one run of a container.
func containerID(uid types.UID, name string, restart int32) string {
	sum := sha256.Sum256([]byte(string(uid) + "\x00" + name + "\x00" + strconv.Itoa(int(restart))))

	return "containerd://" + hex.EncodeToString(sum[:])
}
