package operation

// The ichor operation: an upgrade of Ichor itself (architecture, "Upgrades",
// the Ichor paragraph; issue #27 item 1). The controller never upgrades
// itself in process: it runs the installer Job of the target release, whose
// installer applies its own RBAC, the CRDs, the controller and ichor-ui, and
// rolls back by itself on failure. The installer image never runs by tag.
//
// Steps:
//
//	ichor-resolve  the target is checked again against the IchorInstallation
//	               (helm-managed, a downgrade, a skipped minor: the webhook's
//	               rule, on what holds now), and installerRepository:VERSION
//	               (or spec.ichor.installerDigest) is resolved to
//	               repository@digest, which status.ichor.image records before
//	               anything else happens;
//	ichor-verify   the release workflow's keyless cosign signature of that
//	               digest is verified offline against the trusted Sigstore
//	               root; a refusal (unsigned, tampered, wrong signer) pauses
//	               the operation and nothing is created. With
//	               spec.ichor.installerSignature: skip it is not checked, and
//	               a Warning Event records who skipped it on which image;
//	ichor-install  the installer Job (one per resume token, named from the
//	               operation's UID, recorded in status.ichor.job before it is
//	               created) runs repository@digest in Ichor's namespace; an
//	               existing Job of that name is adopted, never created twice.
//	               The step follows it across reconciles (the controller that
//	               started it is replaced by the Job itself; the new one reads
//	               the step from status and goes on). A completed Job must
//	               have recorded the target in the IchorInstallation; a failed
//	               one pauses the operation with the end of its log.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
	"github.com/maeshinshin/ichor/contracts/pkg/installerimage"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
)

// The installer Job of an ichor operation runs in Ichor's namespace; the
// controller reads it uncached (it watches no Jobs), and reads its pod's log
// when it fails.
// +kubebuilder:rbac:groups=batch,namespace=ichor-system,resources=jobs,verbs=get;create
// +kubebuilder:rbac:groups="",namespace=ichor-system,resources=pods,verbs=list
// +kubebuilder:rbac:groups="",namespace=ichor-system,resources=pods/log,verbs=get
// +kubebuilder:rbac:groups=ichor.maesh.dev,resources=ichorinstallations,verbs=get;list;watch

const (
	opStepIchorResolve = "ichor-resolve"
	opStepIchorVerify  = "ichor-verify"
	opStepIchorInstall = "ichor-install"

	// ichorPoll is how often a running installer Job is looked at.
	ichorPoll = 5 * time.Second
	// ichorLogBytes bounds the log tail a failure carries (the failure
	// reason itself is bounded at 4096 characters).
	ichorLogBytes = 2048
)

func isIchor(op *ichorv1alpha1.TalosOperation) bool {
	return op.Spec.Type == ichorv1alpha1.OperationIchor && op.Spec.Ichor != nil
}

// ichorPhase runs one step of an Ichor upgrade; the later phases leave ichor
// operations alone.
func (r *Reconciler) ichorPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	if !isIchor(op) || halted(op) {
		return ctrl.Result{}, nil
	}

	if op.Status.Ichor == nil {
		op.Status.Ichor = &ichorv1alpha1.IchorUpgradeStatus{}
	}

	switch op.Status.Step {
	case "", opStepSelect, opStepIchorResolve:
		op.Status.Step = opStepIchorResolve

		return r.ichorResolve(ctx, op)
	case opStepIchorVerify:
		return r.ichorVerify(ctx, op)
	case opStepIchorInstall:
		return r.ichorInstall(ctx, s)
	default:
		r.fail(op, nil, op.Status.Step, "unknown step "+op.Status.Step)

		return ctrl.Result{}, nil
	}
}

// ichorResolve is the step ichor-resolve: the target against the
// installation as it is now, then the image's digest, recorded.
func (r *Reconciler) ichorResolve(ctx context.Context, op *ichorv1alpha1.TalosOperation) (ctrl.Result, error) {
	target := op.Spec.Ichor.Version

	ii, err := guard.LoadInstallation(ctx, r.APIReader)
	if err != nil {
		return ctrl.Result{}, err
	}

	if refusals := guard.CheckIchorUpgrade(ii, target); len(refusals) > 0 {
		msgs := make([]string, 0, len(refusals))
		for _, ref := range refusals {
			msgs = append(msgs, ref.Message())
		}

		msg := "pre-checks failed: " + strings.Join(msgs, "; ")
		setCond(op, ichorv1alpha1.PreChecksPassedCondition, metav1.ConditionFalse, ichorv1alpha1.FailedReason, msg)
		r.fail(op, nil, opStepIchorResolve, msg)

		return ctrl.Result{}, nil
	}

	img, err := installerimage.Resolve(ctx, ii.Spec.Version.InstallerRepository, target, op.Spec.Ichor.InstallerDigest, r.Registry)
	if err != nil {
		// A registry away or an image that is not there: a person looks
		// (the message says at what), then resumes.
		r.fail(op, nil, opStepIchorResolve, "resolving the installer image: "+err.Error())

		return ctrl.Result{}, nil //nolint:nilerr // said in failureReason and paused, not an error to back off on
	}

	op.Status.From, op.Status.To = ii.Status.InstalledVersion, target
	op.Status.Ichor.Image = img.Reference()
	setCond(op, ichorv1alpha1.PreChecksPassedCondition, metav1.ConditionTrue, ichorv1alpha1.SucceededReason,
		fmt.Sprintf("Ichor %s to %s: managed by the installer, no downgrade, one minor at most; the installer image is %s", displayVersion(op.Status.From), target, img.Reference()))
	op.Status.Step = opStepIchorVerify
	op.Status.ProgressSequence++

	// The digest is written (the skeleton's status write) before the next
	// step reads the signature or creates anything.
	return ichorreconcile.NextStep(), nil
}

// ichorVerify is the step ichor-verify.
func (r *Reconciler) ichorVerify(ctx context.Context, op *ichorv1alpha1.TalosOperation) (ctrl.Result, error) {
	st := op.Status.Ichor
	if st.Image == "" {
		r.fail(op, nil, opStepIchorVerify, "status.ichor.image is empty: the image was never resolved; delete this operation and create a new one")

		return ctrl.Result{}, nil
	}

	if op.Spec.Ichor.InstallerSignature == guard.SignatureSkip {
		if st.Signature != ichorv1alpha1.SignatureSkipped {
			r.Recorder.Eventf(op, nil, corev1.EventTypeWarning, ichorv1alpha1.SignatureCheckSkippedReason, "Verify",
				"the installer image %s of Ichor %s runs WITHOUT its signature checked: operation %s/%s sets spec.ichor.installerSignature: skip%s",
				st.Image, op.Spec.Ichor.Version, op.Namespace, op.Name, createdBy(op))
		}

		st.Signature, st.Signer = ichorv1alpha1.SignatureSkipped, ""

		return r.ichorNextInstall(op, "the signature check is skipped (spec.ichor.installerSignature: skip)")
	}

	sig, err := installerimage.Verify(ctx, st.Image, r.signaturePolicy(), r.Registry)
	if err != nil {
		var refusal *installerimage.Refusal
		if errors.As(err, &refusal) {
			r.fail(op, nil, opStepIchorVerify, fmt.Sprintf("the installer image's signature is refused (%s): %s. Nothing was created. %s",
				strings.ToLower(refusalWord(refusal.Reason)), refusal.Error(), skipWayOut(refusal.Reason)))

			return ctrl.Result{}, nil
		}

		r.fail(op, nil, opStepIchorVerify, "checking the installer image's signature: "+err.Error())

		return ctrl.Result{}, nil
	}

	st.Signature, st.Signer = ichorv1alpha1.SignatureVerified, sig.Subject+" (issuer "+sig.Issuer+")"

	return r.ichorNextInstall(op, "signed by "+st.Signer)
}

// ichorNextInstall moves to the step ichor-install.
func (r *Reconciler) ichorNextInstall(op *ichorv1alpha1.TalosOperation, why string) (ctrl.Result, error) {
	setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
		fmt.Sprintf("installer image %s: %s", op.Status.Ichor.Image, why))
	op.Status.Step = opStepIchorInstall
	op.Status.ProgressSequence++

	return ichorreconcile.NextStep(), nil
}

// ichorInstall is the step ichor-install: create (or adopt) the Job, follow
// it, read the result.
func (r *Reconciler) ichorInstall(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	st := op.Status.Ichor
	ns := r.namespace()

	if st.Image == "" || (st.Signature != ichorv1alpha1.SignatureVerified && st.Signature != ichorv1alpha1.SignatureSkipped) {
		r.fail(op, nil, opStepIchorInstall, "the installer image was not resolved and checked (status.ichor); delete this operation and create a new one")

		return ctrl.Result{}, nil
	}

	name := ichorJobName(op)
	if st.Job != name {
		// The Job's name is recorded before the Job exists, so a controller
		// that stops between the two finds and adopts it.
		st.Job = name
		op.Status.ProgressSequence++

		if err := s.Persist(ctx); err != nil {
			return ctrl.Result{}, err
		}
	}

	job := &batchv1.Job{}

	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job)
	if apierrors.IsNotFound(err) {
		return r.ichorStartJob(ctx, op, ns, name)
	}

	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading the installer Job %s/%s: %w", ns, name, err)
	}

	if img := jobImage(job); img != st.Image {
		r.fail(op, nil, opStepIchorInstall, fmt.Sprintf("Job %s/%s exists but runs image %q, not the checked %s; it is not this operation's: "+
			"delete that Job (`kubectl -n %s delete job %s`), then resume", ns, name, img, st.Image, ns, name))

		return ctrl.Result{}, nil
	}

	switch done, failed, why := jobEnded(job); {
	case failed:
		msg := fmt.Sprintf("the installer Job %s/%s failed (%s); the installer rolls back to the previous release by itself, "+
			"`kubectl get ichorinstallation %s -o yaml` says whether it did", ns, name, why, ichorv1alpha1.IchorInstallationName)
		if tail := logTail(install.JobLog(ctx, r.APIReader, r.Clientset, ns, name), ichorLogBytes); tail != "" {
			msg += "; the Job's last lines: " + tail
		}

		r.fail(op, nil, opStepIchorInstall, msg+fmt.Sprintf("; the whole log: `kubectl -n %s logs job/%s`", ns, name))

		return ctrl.Result{}, nil
	case !done:
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
			fmt.Sprintf("the installer Job %s/%s installs Ichor %s (`kubectl -n %s logs job/%s -f`)", ns, name, op.Spec.Ichor.Version, ns, name))

		return ctrl.Result{RequeueAfter: r.ichorPoll()}, nil
	}

	if err := install.CheckInstalled(ctx, r.APIReader, op.Spec.Ichor.Version); err != nil {
		if errors.Is(err, install.ErrNotInstalled) {
			r.fail(op, nil, opStepIchorInstall, fmt.Sprintf("%s; read the Job's log with `kubectl -n %s logs job/%s`", err.Error(), ns, name))

			return ctrl.Result{}, nil
		}

		return ctrl.Result{}, err
	}

	return ctrl.Result{}, r.complete(ctx, s, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.SucceededReason,
		fmt.Sprintf("Ichor %s runs, installed from %s by the Job %s/%s (upgraded from %s)", op.Spec.Ichor.Version, st.Image, ns, name, displayVersion(op.Status.From)))
}

// ichorStartJob creates the installer Job; one that appeared meanwhile is
// adopted on the next look.
func (r *Reconciler) ichorStartJob(ctx context.Context, op *ichorv1alpha1.TalosOperation, ns, name string) (ctrl.Result, error) {
	job := install.InstallerJob(ns, name, op.Status.Ichor.Image)
	job.Labels[operationLabel] = op.Name

	if err := r.Client.Create(ctx, job, client.FieldOwner(ControllerName)); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("creating the installer Job %s/%s: %w", ns, name, err)
	}

	ctrl.LoggerFrom(ctx).Info("started the installer Job", "job", name, "image", op.Status.Ichor.Image)
	r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "InstallerStarted", "Start", "the Job %s/%s installs Ichor %s from %s",
		ns, name, op.Spec.Ichor.Version, op.Status.Ichor.Image)
	setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
		fmt.Sprintf("started the installer Job %s/%s", ns, name))

	return ctrl.Result{RequeueAfter: r.ichorPoll()}, nil
}

// operationLabel names, on the installer Job, the operation that runs it.
const operationLabel = "ichor.maesh.dev/operation"

// ichorJobName is the installer Job of this operation's current run:
// ichor-install-<version>-<hash of the operation's UID and resume token>, so
// a restarted controller finds the Job it created and a resume starts a new one.
func ichorJobName(op *ichorv1alpha1.TalosOperation) string {
	sum := sha256.Sum256([]byte(string(op.UID) + "\x00" + op.Status.LastHandledResume))

	base := install.JobName(op.Spec.Ichor.Version)
	if len(base) > 52 {
		base = strings.TrimRight(base[:52], "-")
	}

	return base + "-" + hex.EncodeToString(sum[:])[:10]
}

// jobImage is the image of the Job's installer container.
func jobImage(job *batchv1.Job) string {
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name == "installer" {
			return c.Image
		}
	}

	return ""
}

// jobEnded reads the Job's Complete and Failed conditions (the Job
// controller's, in kube-controller-manager).
func jobEnded(job *batchv1.Job) (done, failed bool, why string) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}

		switch c.Type {
		case batchv1.JobComplete:
			return true, false, ""
		case batchv1.JobFailed:
			return true, true, strings.TrimSpace(strings.TrimSuffix(c.Reason+": "+c.Message, ": "))
		}
	}

	return false, false, ""
}

// logTail is the end of a log on one line, at most n bytes.
func logTail(log string, n int) string {
	line := strings.Join(strings.Fields(strings.ReplaceAll(log, "\n", " | ")), " ")
	if len(line) > n {
		line = "..." + line[len(line)-n:]
	}

	return line
}

// refusalWord names a signature refusal as a person reads it.
func refusalWord(r installerimage.Reason) string {
	switch r {
	case installerimage.Unsigned:
		return "Unsigned"
	case installerimage.Tampered:
		return "Tampered"
	case installerimage.WrongSigner:
		return "Wrong signer"
	}

	return string(r)
}

// skipWayOut says when skipping the check is the way out: only for an image
// nobody signs. A tampered image or another signer's must not run.
func skipWayOut(r installerimage.Reason) string {
	const skip = "`ichor upgrade ichor VERSION --skip-signature-check` (spec.ichor.installerSignature: skip, recorded as a Warning Event)"

	switch r {
	case installerimage.Unsigned:
		return "For a build nobody signs, create a new operation with " + skip + "; otherwise delete this operation"
	case installerimage.WrongSigner:
		return "Delete this operation; if you built and signed this image yourself, create a new operation with " + skip
	}

	return "Delete this operation and do not run this image; " + skip + " exists for builds nobody signs, not for this"
}

// createdBy names the operation's creator when the webhook stamped it.
func createdBy(op *ichorv1alpha1.TalosOperation) string {
	if u := op.Annotations[ichorv1alpha1.RequestedByAnnotation]; u != "" {
		return ", requested by " + u
	}

	return ""
}

func displayVersion(v string) string {
	if v == "" {
		return "(not recorded)"
	}

	return v
}

func (r *Reconciler) namespace() string {
	if r.Namespace != "" {
		return r.Namespace
	}

	return install.Namespace
}

func (r *Reconciler) ichorPoll() time.Duration {
	if r.PollInterval > 0 && r.PollInterval < ichorPoll {
		return r.PollInterval
	}

	return ichorPoll
}

// signaturePolicy is the policy installer images are verified against: the
// signer (SignerIdentity, else the release workflow) and the Sigstore root
// (TrustedRoot, else the embedded public-good root). There is no setting
// that turns verification off; only an operation's recorded skip does.
func (r *Reconciler) signaturePolicy() installerimage.Policy {
	p := installerimage.ReleasePolicy()
	if r.SignerIdentity != (installerimage.Identity{}) {
		p.Identity = r.SignerIdentity
	}

	p.Trust = r.TrustedRoot

	return p
}
