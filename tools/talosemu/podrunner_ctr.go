package talosemu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runCtr is one container of a pod the runner runs, across its restarts.
type runCtr struct {
	p      *runPod
	spec   corev1.Container
	isInit bool
	binary string // the Ichor binary; "" for another image (reported running, no process)

	mu          sync.Mutex
	restarts    int32
	ran         bool // a run was started (by this runner or before a reboot)
	running     bool
	exited      bool
	exitCode    int32
	reason      string // of the termination
	startedAt   time.Time
	finishedAt  time.Time
	id          string
	last        *corev1.ContainerStateTerminated
	waitReason  string
	waitMsg     string
	nextStart   time.Time
	backoff     time.Duration
	started     bool // the startup probe passed (or there is none)
	ready       bool // the readiness probe passes (or there is none)
	liveKill    string
	done        chan struct{} // closed when the current run ended
	pgid        int
	logPath     string
	probeCancel context.CancelFunc
}

// ctrState is a consistent copy of what the pod's worker decides on.
type ctrState struct {
	running, exited, ready bool
	exitCode               int32
	nextStart              time.Time
}

// newRunCtr takes over the container's status from before (a reboot, a restarted emulator):
// a container that was running was stopped with the machine and restarts with its restart
// count plus one and a last state of exit code 255, reason Unknown, as after a node reboot.
func newRunCtr(p *runPod, spec *corev1.Container, isInit bool, prev map[string]corev1.ContainerStatus) *runCtr {
	c := &runCtr{p: p, spec: *spec.DeepCopy(), isInit: isInit, binary: ichorBinary(spec.Image)}

	s, ok := prev[spec.Name]
	if !ok {
		return c
	}

	c.restarts = s.RestartCount
	c.last = s.LastTerminationState.Terminated

	switch {
	case s.State.Running != nil:
		c.ran, c.exited, c.exitCode, c.reason = true, true, 255, "Unknown"
		c.startedAt, c.finishedAt = s.State.Running.StartedAt.Time, time.Now()
		c.id = s.ContainerID
	case s.State.Terminated != nil:
		t := s.State.Terminated
		c.ran, c.exited, c.exitCode, c.reason = true, true, t.ExitCode, t.Reason
		c.startedAt, c.finishedAt, c.id = t.StartedAt.Time, t.FinishedAt.Time, s.ContainerID
	}

	return c
}

func (c *runCtr) snapshot() ctrState {
	c.mu.Lock()
	defer c.mu.Unlock()

	return ctrState{running: c.running, exited: c.exited, ready: c.ready && c.started, exitCode: c.exitCode, nextStart: c.nextStart}
}

// fieldPath is the container's field path in Events.
func (c *runCtr) fieldPath() string {
	if c.isInit {
		return "spec.initContainers{" + c.spec.Name + "}"
	}

	return "spec.containers{" + c.spec.Name + "}"
}

// terminatedState is the current run's termination.
func (c *runCtr) terminatedStateLocked() *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{
		ExitCode: c.exitCode, Reason: c.reason,
		StartedAt:   metav1.NewTime(c.startedAt.UTC().Truncate(time.Second)),
		FinishedAt:  metav1.NewTime(c.finishedAt.UTC().Truncate(time.Second)),
		ContainerID: c.id,
	}
}

// start runs the container once more: its binary with the container's command, args and
// environment, its output logged; a failure before the process runs leaves it waiting with
// the kubelet's reason.
func (c *runCtr) start(ctx context.Context, pod *corev1.Pod) {
	c.mu.Lock()
	if c.running || time.Now().Before(c.nextStart) {
		c.mu.Unlock()

		return
	}
	c.mu.Unlock()

	if c.binary == "" {
		// another image in an Ichor pod: reported running and ready (an init container:
		// completed), nothing runs
		c.begin(0, nil)

		if c.isInit {
			c.finish(0, "Completed")
		}

		return
	}

	bin, err := c.p.r.m.world.imageBinary(c.spec.Image, c.binary)
	if err != nil {
		c.wait("InvalidImageName", err.Error(), 10*time.Second)
		c.p.r.event(pod, corev1.EventTypeWarning, "InspectFailed", c.fieldPath(), err.Error())

		return
	}

	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		fix := "build it: `go tool task build`"
		if strings.Contains(c.spec.Image, "@") {
			fix = "no build of this digest was written there: a digest runs only the build of its own image"
		}

		c.wait("ErrImagePull", fmt.Sprintf("talosemu: image %q runs %s, which is not there (%s)", c.spec.Image, bin, fix), 10*time.Second)
		c.p.r.event(pod, corev1.EventTypeWarning, "Failed", c.fieldPath(), "Failed to pull image "+strconv.Quote(c.spec.Image)+": no binary "+bin)

		return
	}

	launch, err := c.p.launchSpec(ctx, pod, &c.spec, bin)
	if err != nil {
		reason := "CreateContainerConfigError"

		var re runError
		if errors.As(err, &re) {
			reason = "RunContainerError"
		}

		c.wait(reason, err.Error(), 5*time.Second)
		c.p.r.event(pod, corev1.EventTypeWarning, "Failed", c.fieldPath(), "Error: "+err.Error())

		return
	}

	c.mu.Lock()
	n := c.restarts
	if c.ran {
		n++
	}
	c.mu.Unlock()

	logDir := filepath.Join(c.p.dir, "logs", c.spec.Name)
	if err := os.MkdirAll(logDir, stateDirFileMode); err != nil {
		c.wait("CreateContainerError", err.Error(), 5*time.Second)

		return
	}

	logPath := filepath.Join(logDir, strconv.Itoa(int(n))+".log")

	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, secretFileMode)
	if err != nil {
		c.wait("CreateContainerError", err.Error(), 5*time.Second)

		return
	}

	lw := &criLogWriter{f: logf}

	outR, outW, err := os.Pipe()
	if err != nil {
		_ = logf.Close()

		return
	}

	errR, errW, err := os.Pipe()
	if err != nil {
		_ = logf.Close()
		_ = outR.Close()
		_ = outW.Close()

		return
	}

	cmd := exec.Command(launch.argv[0], launch.argv[1:]...) //nolint:gosec,noctx // an Ichor binary of Options.PodBinDir; stopped by stop
	cmd.Env, cmd.Dir = launch.env, launch.dir
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	startErr := cmd.Start()

	_ = outW.Close()
	_ = errW.Close()

	var copying sync.WaitGroup

	copying.Add(2)

	go func() { defer copying.Done(); lw.copy("stdout", outR) }()
	go func() { defer copying.Done(); lw.copy("stderr", errR) }()

	c.mu.Lock()
	c.logPath = logPath
	c.mu.Unlock()

	if startErr != nil {
		copying.Wait()
		_ = logf.Close()

		c.begin(n, nil)
		c.finish(128, "StartError")
		c.p.r.event(pod, corev1.EventTypeWarning, "Failed", c.fieldPath(), "Error: "+startErr.Error())
		c.p.poke()

		return
	}

	c.begin(n, cmd)
	c.p.r.event(pod, corev1.EventTypeNormal, "Started", c.fieldPath(), "Started container "+c.spec.Name)

	go func() {
		err := cmd.Wait()

		// the container's other processes end with it, as in a container's PID namespace
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

		copying.Wait()
		_ = logf.Close()

		code, reason := int32(0), "Completed"

		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code, reason = int32(ee.ExitCode()), "Error" //nolint:gosec // an exit status: 0–255, or -1

			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int32(ws.Signal()) //nolint:gosec // a signal number
			}
		} else if err != nil {
			code, reason = 128, "Error"
		}

		c.finish(code, reason)
		c.p.poke()
	}()
}

// begin records a new run (restart count n; cmd nil for a container without a process) and
// starts its probes.
func (c *runCtr) begin(n int32, cmd *exec.Cmd) {
	c.mu.Lock()

	if c.exited {
		c.last = c.terminatedStateLocked()
	}

	c.restarts = n
	c.ran, c.running, c.exited = true, true, false
	c.exitCode, c.reason, c.waitReason, c.waitMsg = 0, "", "", ""
	c.startedAt, c.finishedAt = time.Now(), time.Time{}
	c.id = containerID(c.p.uid, c.spec.Name, n)
	c.done = make(chan struct{})
	c.pgid = 0
	c.liveKill = ""

	if cmd != nil {
		c.pgid = cmd.Process.Pid
	}

	ctx, cancel := context.WithCancel(c.p.r.ctx)
	c.probeCancel = cancel
	c.started = c.spec.StartupProbe == nil || cmd == nil
	c.ready = c.spec.ReadinessProbe == nil || cmd == nil || c.isInit
	c.mu.Unlock()

	if cmd != nil {
		c.startProbes(ctx)
	}
}

// finish records the end of the current run and schedules the next one's backoff.
func (c *runCtr) finish(code int32, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if !c.running {
		return
	}

	if c.probeCancel != nil {
		c.probeCancel()
	}

	now := time.Now()
	if now.Sub(c.startedAt) >= backoffReset {
		c.backoff = 0
	}

	c.running, c.exited, c.exitCode, c.reason, c.finishedAt = false, true, code, reason, now
	c.ready, c.pgid = false, 0
	c.nextStart = now.Add(c.backoff)

	switch {
	case c.backoff == 0:
		c.backoff = backoffInitial
	case c.backoff < backoffMax:
		c.backoff = min(c.backoff*2, backoffMax)
	}

	if c.done != nil {
		close(c.done)
	}
}

// wait leaves the container waiting with reason until retry.
func (c *runCtr) wait(reason, msg string, retry time.Duration) {
	c.mu.Lock()
	c.waitReason, c.waitMsg, c.nextStart = reason, msg, time.Now().Add(retry)
	c.mu.Unlock()
}

// stop ends the current run: SIGTERM to its process group, SIGKILL after grace (at once for
// grace 0), as the runtime's StopContainer does.
func (c *runCtr) stop(grace time.Duration) {
	c.mu.Lock()
	running, pgid, done := c.running, c.pgid, c.done
	c.mu.Unlock()

	if !running {
		return
	}

	if pgid == 0 {
		// no process: it ends at once
		c.finish(0, "Completed")

		return
	}

	sig := syscall.SIGTERM
	if grace <= 0 {
		sig = syscall.SIGKILL
	}

	_ = syscall.Kill(-pgid, sig)

	t := time.NewTimer(max(grace, 0))
	defer t.Stop()

	select {
	case <-done:
		return
	case <-t.C:
	}

	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-done
}

// reapLiveness stops a run whose liveness or startup probe failed (it then restarts as
// restartPolicy says), with the probe's grace period if it has one.
func (c *runCtr) reapLiveness() {
	c.mu.Lock()
	why := c.liveKill
	running := c.running
	c.liveKill = ""
	c.mu.Unlock()

	if why == "" || !running {
		return
	}

	pod, _ := c.p.current()
	grace := podGrace(pod)

	for _, pr := range []*corev1.Probe{c.spec.LivenessProbe, c.spec.StartupProbe} {
		if pr != nil && pr.TerminationGracePeriodSeconds != nil {
			grace = time.Duration(*pr.TerminationGracePeriodSeconds) * time.Second
		}
	}

	if pod != nil {
		c.p.r.event(pod, corev1.EventTypeNormal, "Killing", c.fieldPath(), "Container "+c.spec.Name+" failed "+why+" probe, will be restarted")
	}

	c.stop(grace)
}

// apiStatus is the container's status as the kubelet reports it.
func (c *runCtr) apiStatus(sandboxWait string) corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()

	ref, _, _ := strings.Cut(c.spec.Image, "@")
	s := corev1.ContainerStatus{
		Name: c.spec.Name, Image: c.spec.Image,
		ImageID:              ref + "@sha256:" + seed(c.spec.Image, "image-digest"),
		RestartCount:         c.restarts,
		Ready:                c.running && c.ready && c.started,
		Started:              new(c.running && c.started),
		LastTerminationState: corev1.ContainerState{Terminated: c.last},
	}

	if c.ran {
		s.ContainerID = c.id
	}

	pod, _ := c.p.current()
	policy := corev1.RestartPolicyAlways

	if pod != nil {
		policy = pod.Spec.RestartPolicy
	}

	switch {
	case c.running:
		s.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.startedAt.UTC().Truncate(time.Second))}
	case c.exited && restarts(policy, c.exitCode) && (!c.isInit || c.exitCode != 0) && time.Now().Before(c.nextStart):
		s.State.Waiting = &corev1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", c.nextStart.Sub(c.finishedAt).Round(time.Second), c.spec.Name, c.p.name, c.p.ns, c.p.uid),
		}
		s.LastTerminationState = corev1.ContainerState{Terminated: c.terminatedStateLocked()}
	case c.exited:
		s.State.Terminated = c.terminatedStateLocked()
	case c.waitReason != "":
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: c.waitReason, Message: c.waitMsg}
	case !c.isInit && len(c.p.inits) > 0 && !c.p.initsDone():
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
	default:
		s.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: sandboxWait}
	}

	return s
}

// initsDone is true when every init container exited 0.
func (p *runPod) initsDone() bool {
	for _, c := range p.inits {
		if s := c.snapshot(); !s.exited || s.exitCode != 0 {
			return false
		}
	}

	return true
}

// logFile is the log of the container's current run (previous: the run before), and whether
// that run still goes on.
func (c *runCtr) logFile(previous bool) (path string, live <-chan struct{}, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if c.logPath == "" {
		return "", nil, errWaiting
	}

	if previous {
		if c.last == nil || c.restarts == 0 {
			return "", nil, errNoPrevious
		}

		return filepath.Join(filepath.Dir(c.logPath), strconv.Itoa(int(c.restarts-1))+".log"), nil, nil
	}

	if c.running {
		return c.logPath, c.done, nil
	}

	return c.logPath, nil, nil
}

var (
	errWaiting    = errors.New("is waiting to start")
	errNoPrevious = errors.New("previous terminated container not found")
)

// criLogWriter writes a container's output in the CRI log format containerd writes
// (k8s.io/cri-api … logs: "<RFC 3339 nano time> <stream> F <line>").
type criLogWriter struct {
	mu sync.Mutex
	f  *os.File
}

func (w *criLogWriter) copy(stream string, r io.ReadCloser) {
	defer r.Close() //nolint:errcheck

	br := bufio.NewReaderSize(r, 64<<10)

	for {
		line, err := br.ReadString('\n')
		if line != "" {
			line = strings.TrimSuffix(line, "\n")

			w.mu.Lock()
			_, _ = fmt.Fprintf(w.f, "%s %s F %s\n", time.Now().UTC().Format(time.RFC3339Nano), stream, line)
			w.mu.Unlock()
		}

		if err != nil {
			return
		}
	}
}
