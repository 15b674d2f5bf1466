package operation

// The cni operation: a Cilium chart upgrade (architecture, "Cilium",
// "Upgrades"; issue #20 item 3). Ichor's Helm release kube-system/cilium
// moves to another chart this Ichor embeds, at most one minor up, through the
// same ichor-cni Job that hands Cilium over (controller/internal/cnijob),
// under the cluster lock the operation holds. A failed upgrade is rolled
// back by the Job (cilium.Apply) to the last deployed revision, and the
// operation pauses on the step with what Helm's record says; a resume runs a
// new Job.
//
// Steps: cni-check (the release is Ichor's and deployed; the target is
// checked again against the chart Helm's record says runs, the one source
// the webhook could not read) → cni-apply (one Job per resume, named from the
// operation's UID and its resume token, so a restarted controller finds the
// Job it started instead of starting another; done when Helm's record is
// deployed with the target chart and the requested values, whatever the
// Job's exit code says).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/controller/internal/cnijob"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

const (
	opStepCNICheck = "cni-check"
	opStepCNIApply = "cni-apply"

	// DefaultCNIJobTimeout bounds one Helm run of a chart upgrade, its
	// rollout waits (and a rollback's) included.
	DefaultCNIJobTimeout = 10 * time.Minute
	// cniPoll is how often a running upgrade Job is looked at.
	cniPoll = 5 * time.Second
	// jobLogLines is how much of a failed Job's log goes into the failure.
	jobLogLines = 5
)

func isCNI(op *ichorv1alpha1.TalosOperation) bool {
	return op.Spec.Type == ichorv1alpha1.OperationCNI && op.Spec.CNI != nil
}

// cniPhase runs one step of a Cilium chart upgrade; the later phases leave
// cni operations alone.
func (r *Reconciler) cniPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	if !isCNI(op) || halted(op) {
		return ctrl.Result{}, nil
	}

	cfg, k, err := workload.ForCluster(ctx, r.APIReader, r.Client, r.Nodes, s.Cluster)
	if err != nil {
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
			"the cluster's Kubernetes API is not reachable: "+err.Error())

		return ctrl.Result{RequeueAfter: cniPoll}, nil //nolint:nilerr // an API server away is waited for, said in Ready, not an error to back off on
	}

	u := &cniUpgrade{r: r, s: s, op: op, cfg: cfg, k: k, target: guard.CNIVersion(op.Spec.CNI.Version), step: opStepCNIApply}
	u.what = fmt.Sprintf("upgrades Helm release %s from chart %s to %s", cilium.ReleaseName, op.Status.From, u.target)
	u.event = "CiliumUpgradeStarted"
	u.applied = func(_ context.Context, deployed *cilium.ReleaseState) (ctrl.Result, error) {
		return ctrl.Result{}, r.complete(ctx, s, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.SucceededReason,
			fmt.Sprintf("Cilium runs chart %s (Helm revision %d of release %s/%s), upgraded from %s", u.target, deployed.Revision,
				cilium.Namespace, cilium.ReleaseName, op.Status.From))
	}

	switch op.Status.Step {
	case "", opStepSelect, opStepCNICheck:
		op.Status.Step = opStepCNICheck

		return u.check(ctx)
	case opStepCNIApply:
		return u.apply(ctx)
	default:
		r.fail(op, nil, op.Status.Step, "unknown step "+op.Status.Step)

		return ctrl.Result{}, nil
	}
}

// cniUpgrade is one reconcile of a Job run over Cilium's release (a chart
// upgrade, or the values of a kube-proxy switch) with the cluster it reaches.
type cniUpgrade struct {
	r      *Reconciler
	s      *scope
	op     *ichorv1alpha1.TalosOperation
	cfg    *rest.Config
	k      kubernetes.Interface
	target string
	// step is the operation step the Job runs in; what says what the Job
	// does ("upgrades Helm release cilium from chart A to B"); event is the
	// reason of the Event at its start.
	step, what, event string
	// applied goes on once Helm's record says the request is deployed.
	applied func(context.Context, *cilium.ReleaseState) (ctrl.Result, error)
}

// request is what the Job applies: the cluster's Cilium request (values,
// Kubernetes version, Node count) with the target chart.
func (u *cniUpgrade) request(ctx context.Context, deployed *cilium.ReleaseState) (cilium.Request, string, error) {
	ds, err := u.k.AppsV1().DaemonSets(cilium.Namespace).Get(ctx, "cilium", metav1.GetOptions{})
	if err != nil {
		return cilium.Request{}, "", fmt.Errorf("reading DaemonSet %s/cilium: %w", cilium.Namespace, err)
	}

	nodes, err := u.k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return cilium.Request{}, "", fmt.Errorf("listing the cluster's Nodes: %w", err)
	}

	req, err := cnijob.Request(u.s.Cluster, ds, deployed, len(nodes.Items))
	if err != nil {
		return cilium.Request{}, "", err
	}

	req.Version = u.target

	hash, err := cnijob.ValuesHash(req)
	if err != nil {
		return cilium.Request{}, "", err
	}

	return req, hash, nil
}

// check is the step cni-check: the target against what Helm's record says runs.
func (u *cniUpgrade) check(ctx context.Context) (ctrl.Result, error) {
	op, c := u.op, u.s.Cluster

	deployed, err := cilium.Deployed(ctx, u.cfg)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading Helm's release %s/%s: %w", cilium.Namespace, cilium.ReleaseName, err)
	}

	if deployed == nil || deployed.Status != releaseDeployed {
		u.r.fail(op, nil, opStepCNICheck, fmt.Sprintf("Helm's release %s/%s is not deployed (%s); the hand-over controller reports why in the TalosCluster's CNIHandover condition",
			cilium.Namespace, cilium.ReleaseName, cnijob.Describe(deployed)))

		return ctrl.Result{}, nil
	}

	if deployed.Version == u.target {
		return ctrl.Result{}, u.r.complete(ctx, u.s, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.SucceededReason,
			fmt.Sprintf("Cilium already runs chart %s (Helm revision %d); nothing was changed", u.target, deployed.Revision))
	}

	// Admission checked the pair (an override went past it there, recorded);
	// what it could not check is the chart that really runs.
	var problems []string

	for _, ref := range guard.CheckCNIUpgrade(c, guard.CNIFacts{Running: deployed.Version}, u.target) {
		if !ref.Overridable {
			problems = append(problems, ref.Message())
		}
	}

	if len(problems) > 0 {
		msg := "pre-checks failed: " + strings.Join(problems, "; ")
		setCond(op, ichorv1alpha1.PreChecksPassedCondition, metav1.ConditionFalse, ichorv1alpha1.FailedReason, msg)
		u.r.fail(op, nil, opStepCNICheck, msg)

		return ctrl.Result{}, nil
	}

	if ok, why, err := workload.DaemonSetRolledOut(ctx, u.k, cilium.Namespace, "cilium"); err != nil || !ok {
		if err != nil {
			why = err.Error()
		}

		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
			"waiting for Cilium's DaemonSet to be rolled out before the upgrade: "+why)

		return ctrl.Result{RequeueAfter: cniPoll}, nil
	}

	op.Status.From, op.Status.To = deployed.Version, u.target
	setCond(op, ichorv1alpha1.PreChecksPassedCondition, metav1.ConditionTrue, ichorv1alpha1.SucceededReason,
		fmt.Sprintf("cilium %s to %s: Helm's release is deployed, the step is one minor at most, Cilium's DaemonSet is rolled out", deployed.Version, u.target))
	op.Status.Step = opStepCNIApply
	op.Status.ProgressSequence++

	return ichorreconcile.NextStep(), nil
}

// jobName is the Job of this operation's current run: one per resume token,
// so a restarted controller finds the Job it created.
func (u *cniUpgrade) jobName() string {
	sum := sha256.Sum256([]byte(string(u.op.UID) + "\x00" + u.op.Status.LastHandledResume))

	return "ichor-cni-op-" + hex.EncodeToString(sum[:])[:10]
}

// apply is the step cni-apply: start the Job, follow it, read the result
// from Helm's record.
func (u *cniUpgrade) apply(ctx context.Context) (ctrl.Result, error) {
	op := u.op
	name := u.jobName()

	job, err := u.k.BatchV1().Jobs(cilium.Namespace).Get(ctx, name, metav1.GetOptions{})
	missing := apierrors.IsNotFound(err)

	if err != nil && !missing {
		return ctrl.Result{}, fmt.Errorf("reading Job %s/%s: %w", cilium.Namespace, name, err)
	}

	deployed, err := cilium.Deployed(ctx, u.cfg)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading Helm's release %s/%s: %w", cilium.Namespace, cilium.ReleaseName, err)
	}

	if missing {
		return u.start(ctx, name, deployed)
	}

	st, why := cnijob.State(job)
	if st == cnijob.Running {
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
			fmt.Sprintf("the Job %s/%s %s (kubectl -n %s logs job/%s)", cilium.Namespace, name, u.what, cilium.Namespace, name))

		return ctrl.Result{RequeueAfter: cniPoll}, nil
	}

	req, hash, err := u.request(ctx, deployed)
	if err != nil {
		return ctrl.Result{}, err
	}

	if cnijob.Applied(deployed, req, hash) {
		if err := cnijob.Delete(ctx, u.k, name); err != nil {
			return ctrl.Result{}, err
		}

		return u.applied(ctx, deployed)
	}

	if st == cnijob.Succeeded {
		why = "the Job ended without error"
	}

	msg := fmt.Sprintf("the Job %s/%s that %s did not succeed (%s); Helm's record: %s",
		cilium.Namespace, name, u.what, why, cnijob.Describe(deployed))
	if deployed != nil && deployed.Status == releaseDeployed && deployed.Version == op.Status.From {
		msg += fmt.Sprintf(" (rolled back: Cilium runs chart %s as before)", op.Status.From)
	}

	if tail := u.logTail(ctx, name); tail != "" {
		msg += "; the Job's last lines: " + tail
	}

	u.r.fail(op, nil, u.step, msg+fmt.Sprintf("; the whole log: `kubectl -n %s logs job/%s`", cilium.Namespace, name))

	return ctrl.Result{}, nil
}

// start creates the Job of this run.
func (u *cniUpgrade) start(ctx context.Context, name string, deployed *cilium.ReleaseState) (ctrl.Result, error) {
	req, _, err := u.request(ctx, deployed)
	if err != nil {
		u.r.fail(u.op, nil, u.step, err.Error())

		return ctrl.Result{}, nil
	}

	if err := cnijob.Create(ctx, u.k, u.r.installerImage(), u.r.CNIJobTimeout, req, name,
		map[string]string{cnijob.OperationLabel: u.op.Name}, nil); err != nil {
		return ctrl.Result{}, err
	}

	ctrl.LoggerFrom(ctx).Info("started the Cilium Job", "job", name, "what", u.what)
	u.r.Recorder.Eventf(u.op, nil, corev1.EventTypeNormal, u.event, "Start", "the Job %s/%s %s", cilium.Namespace, name, u.what)
	setCond(u.op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
		fmt.Sprintf("started the Job %s/%s", cilium.Namespace, name))

	return ctrl.Result{RequeueAfter: cniPoll}, nil
}

// logTail is the end of the Job's pod log, on one line; "" when it cannot
// be read.
func (u *cniUpgrade) logTail(ctx context.Context, job string) string {
	pods, err := u.k.CoreV1().Pods(cilium.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil || len(pods.Items) == 0 {
		return ""
	}

	lines := int64(jobLogLines)

	rc, err := u.k.CoreV1().Pods(cilium.Namespace).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{TailLines: &lines}).Stream(ctx)
	if err != nil {
		return ""
	}

	defer func() { _ = rc.Close() }()

	data, err := io.ReadAll(io.LimitReader(rc, 4096))
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}

	return strings.Join(strings.Fields(strings.ReplaceAll(string(data), "\n", " | ")), " ")
}
