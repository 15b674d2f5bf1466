package webhook

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
)

// +kubebuilder:webhook:path=/validate-ichor-maesh-dev-v1alpha1-talosoperation,mutating=false,failurePolicy=fail,sideEffects=None,groups=ichor.maesh.dev,resources=talosoperations,verbs=create;update,versions=v1alpha1,name=vtalosoperation.ichor.maesh.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-ichor-maesh-dev-v1alpha1-talosetcdbackup,mutating=false,failurePolicy=fail,sideEffects=None,groups=ichor.maesh.dev,resources=talosetcdbackups,verbs=create;update,versions=v1alpha1,name=vtalosetcdbackup.ichor.maesh.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-ichor-maesh-dev-v1alpha1-ichorinstallation,mutating=false,failurePolicy=fail,sideEffects=None,groups=ichor.maesh.dev,resources=ichorinstallations,verbs=create;update,versions=v1alpha1,name=vichorinstallation.ichor.maesh.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-ichor-maesh-dev-v1alpha1-machinereclaim,mutating=false,failurePolicy=fail,sideEffects=None,groups=ichor.maesh.dev,resources=machinereclaims,verbs=create;update,versions=v1alpha1,name=vmachinereclaim.ichor.maesh.dev,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-ichor-maesh-dev-v1alpha1-taloscredentialrequest,mutating=false,failurePolicy=fail,sideEffects=None,groups=ichor.maesh.dev,resources=taloscredentialrequests,verbs=create;update,versions=v1alpha1,name=vtaloscredentialrequest.ichor.maesh.dev,admissionReviewVersions=v1

// operationValidator checks TalosOperations: targets, the verbs of the
// destructive operations, and whether this release runs the type. The spec is
// immutable except spec.paused (CEL on the type, and guard.CheckOperationUnchanged
// here): an update that changes more is refused, with the checks of a create.
type operationValidator struct{ *checker }

func (v *operationValidator) ValidateCreate(ctx context.Context, op *ichorv1alpha1.TalosOperation) (admission.Warnings, error) {
	facts, err := guard.LoadOperationFacts(ctx, v.reader, op)
	if err != nil {
		return nil, internal(err)
	}
	if w, err := v.checkPrivilegedRollout(ctx, op); err != nil {
		return w, err
	}
	s := operationSubject(op)
	reqs := append(guard.OperationRequirements(op), guard.OperationAnnotationRequirements(nil, op)...)
	refusals := guard.CheckOperation(op, facts)
	// The single node's downtime needs the person's consent on the write
	// (the CLI and the console ask, then set it); the backup and capacity
	// findings are warnings (architecture, "Topology").
	if r := guard.CheckOperationDowntime(op, facts.Approved); r != nil {
		refusals = append(refusals, *r)
	}
	w, err := v.decideRunnable(ctx, s, op, refusals, reqs)
	if err != nil {
		return w, err
	}
	if u := op.Spec.Ichor; op.Spec.Type == ichorv1alpha1.OperationIchor && u != nil && u.InstallerSignature == guard.SignatureSkip {
		w = append(w, v.recordSignatureSkip(ctx, op))
	}
	return append(w, guard.OperationWarnings(op, facts, time.Now())...), nil
}

// recordSignatureSkip leaves a Warning Event on the cluster that names who
// asked to run Ichor's installer image without its signature checked (not
// for a dry run), and returns the same as an admission warning. The
// controller records the image it runs so on the operation.
func (v *operationValidator) recordSignatureSkip(ctx context.Context, op *ichorv1alpha1.TalosOperation) string {
	user := "(unknown)"
	req, err := admission.RequestFromContext(ctx)
	if err == nil {
		user = req.UserInfo.Username
	}
	msg := fmt.Sprintf("TalosOperation %s/%s: %s asked to run the installer image of Ichor %s without checking its signature (spec.ichor.installerSignature: skip)",
		op.Namespace, op.Name, user, op.Spec.Ichor.Version)
	if err != nil || (req.DryRun != nil && *req.DryRun) {
		return msg
	}
	if cluster, err := guard.LoadCluster(ctx, v.reader, op.Namespace, op.Spec.ClusterName); err == nil && cluster != nil {
		v.events.Eventf(cluster, nil, corev1.EventTypeWarning, ichorv1alpha1.SignatureCheckSkippedReason, "Admit", "%s", msg)
	}
	return msg
}

// decideRunnable decides as decide does, then refuses a type this release
// does not run (guard.ValidateOperation's last check). The verbs come first,
// so that a user who lacks one hears so whether or not the type runs yet.
func (v *operationValidator) decideRunnable(ctx context.Context, s subject, op *ichorv1alpha1.TalosOperation,
	refusals []guard.Refusal, reqs []guard.Requirement,
) (admission.Warnings, error) {
	warnings, err := v.decide(ctx, s, refusals, reqs)
	if err != nil {
		return warnings, err
	}
	if r := guard.CheckRunnable(op); r != nil {
		return warnings, invalid(s, []guard.Refusal{*r})
	}
	return warnings, nil
}

// ValidateUpdate lets spec.paused and metadata change (the override
// annotation needs its verb); any other change of the spec is refused, with
// what the same spec would meet at create.
func (v *operationValidator) ValidateUpdate(ctx context.Context, old, op *ichorv1alpha1.TalosOperation) (admission.Warnings, error) {
	changed := guard.CheckOperationUnchanged(old, op)
	if changed == nil {
		// Metadata only: setting the override annotation needs its verb.
		return v.decide(ctx, operationSubject(op), nil, guard.OperationAnnotationRequirements(old, op))
	}
	facts, err := guard.LoadOperationFacts(ctx, v.reader, op)
	if err != nil {
		return nil, internal(err)
	}
	s := operationSubject(op)
	return v.decide(ctx, s, append([]guard.Refusal{*changed}, guard.ValidateOperation(op, facts)...), guard.OperationRequirements(op))
}

func (v *operationValidator) ValidateDelete(context.Context, *ichorv1alpha1.TalosOperation) (admission.Warnings, error) {
	return nil, nil
}

// backupValidator checks the Secret-naming fields of TalosEtcdBackups.
type backupValidator struct{ *checker }

func (v *backupValidator) subject(b *ichorv1alpha1.TalosEtcdBackup) subject {
	return subject{kind: "TalosEtcdBackup", resource: guard.ResourceTalosEtcdBackups, namespace: b.Namespace, name: b.Name, cluster: b.Spec.ClusterName}
}

func (v *backupValidator) ValidateCreate(ctx context.Context, b *ichorv1alpha1.TalosEtcdBackup) (admission.Warnings, error) {
	return v.withStoreWarning(ctx, b)(v.decide(ctx, v.subject(b), guard.CheckBackupRunnable(b), guard.BackupRequirements(nil, b)))
}

func (v *backupValidator) ValidateUpdate(ctx context.Context, old, b *ichorv1alpha1.TalosEtcdBackup) (admission.Warnings, error) {
	var refusals []guard.Refusal
	if old.Spec.Schedule != b.Spec.Schedule || old.Spec.S3.Endpoint != b.Spec.S3.Endpoint {
		refusals = guard.CheckBackupRunnable(b)
	}
	return v.withStoreWarning(ctx, b)(v.decide(ctx, v.subject(b), refusals, guard.BackupRequirements(old, b)))
}

// withStoreWarning adds a warning to an accepted write when the store lives
// inside the cluster it backs up: the backup runs, but a restore into the
// live cluster will refuse that store (the StoreInCluster condition says
// the same afterwards).
func (v *backupValidator) withStoreWarning(ctx context.Context, b *ichorv1alpha1.TalosEtcdBackup) func(admission.Warnings, error) (admission.Warnings, error) {
	return func(w admission.Warnings, err error) (admission.Warnings, error) {
		if err != nil {
			return w, err
		}
		cluster := &ichorv1alpha1.TalosCluster{}
		if gerr := v.reader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.ClusterName}, cluster); gerr != nil {
			cluster = nil
		}
		if why := guard.BackupStoreInCluster(b, cluster); why != "" {
			w = append(w, fmt.Sprintf("spec.s3.endpoint: the store lives inside the cluster it backs up (%s); "+
				"snapshots are taken, but a restore into the live cluster will be refused: use a store outside the cluster", why))
		}
		return w, nil
	}
}

func (v *backupValidator) ValidateDelete(context.Context, *ichorv1alpha1.TalosEtcdBackup) (admission.Warnings, error) {
	return nil, nil
}

// installationValidator splits the write rights over the IchorInstallation's
// version and settings.
type installationValidator struct{ *checker }

func (v *installationValidator) subject(i *ichorv1alpha1.IchorInstallation) subject {
	return subject{kind: "IchorInstallation", resource: guard.ResourceIchorInstallations, name: i.Name}
}

func (v *installationValidator) ValidateCreate(ctx context.Context, i *ichorv1alpha1.IchorInstallation) (admission.Warnings, error) {
	return v.decide(ctx, v.subject(i), guard.ValidateSettings(i.Spec.Settings), guard.InstallationRequirements(nil, i))
}

func (v *installationValidator) ValidateUpdate(ctx context.Context, old, i *ichorv1alpha1.IchorInstallation) (admission.Warnings, error) {
	return v.decide(ctx, v.subject(i), guard.ValidateSettings(i.Spec.Settings), guard.InstallationRequirements(old, i))
}

func (v *installationValidator) ValidateDelete(context.Context, *ichorv1alpha1.IchorInstallation) (admission.Warnings, error) {
	return nil, nil
}

// reclaimValidator checks the reclaim verb on create and on the typed UUID,
// the credential's TTL, and keeps the requester and confirmer annotations as
// the mutating webhook stamped them.
type reclaimValidator struct{ *checker }

func (v *reclaimValidator) subject(r *ichorv1alpha1.MachineReclaim) subject {
	return subject{kind: "MachineReclaim", resource: guard.ResourceMachineReclaims, namespace: r.Namespace, name: r.Name}
}

func (v *reclaimValidator) ValidateCreate(ctx context.Context, r *ichorv1alpha1.MachineReclaim) (admission.Warnings, error) {
	secret := &corev1.Secret{}
	var secretType *string
	err := v.reader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Spec.CredentialsRef.Name}, secret)
	switch {
	case err == nil:
		t := string(secret.Type)
		secretType = &t
	case !apierrors.IsNotFound(err):
		return nil, apierrors.NewInternalError(fmt.Errorf("reading Secret %s/%s: %w", r.Namespace, r.Spec.CredentialsRef.Name, err))
	}
	user, err := requester(ctx)
	if err != nil {
		return nil, err
	}
	refusals := append(guard.ValidateReclaim(r), guard.CheckReclaimCredential(r, secretType)...)
	refusals = append(refusals, requesterOnCreate(r, user)...)
	refusals = append(refusals, confirmerOnWrite(user, r)...)
	return v.decide(ctx, v.subject(r), refusals, guard.ReclaimRequirements(nil, r))
}

func (v *reclaimValidator) ValidateUpdate(ctx context.Context, old, r *ichorv1alpha1.MachineReclaim) (admission.Warnings, error) {
	user, err := requester(ctx)
	if err != nil {
		return nil, err
	}
	refusals := append(guard.ValidateReclaim(r), keptAnnotation(old, r, ichorv1alpha1.RequestedByAnnotation)...)
	refusals = append(refusals, confirmerRefusals(user, old, r)...)
	return v.decide(ctx, v.subject(r), refusals, guard.ReclaimRequirements(old, r))
}

func (v *reclaimValidator) ValidateDelete(context.Context, *ichorv1alpha1.MachineReclaim) (admission.Warnings, error) {
	return nil, nil
}

// credentialRequestValidator checks that the requester may download the
// credential's purpose and asks for no longer than it allows, and keeps the
// requester annotation as the mutating webhook stamped it.
type credentialRequestValidator struct{ *checker }

func (v *credentialRequestValidator) subject(r *ichorv1alpha1.TalosCredentialRequest) subject {
	return subject{kind: "TalosCredentialRequest", resource: guard.ResourceTalosCredentialRequests, namespace: r.Namespace, name: r.Name, cluster: r.Spec.ClusterName}
}

func (v *credentialRequestValidator) ValidateCreate(ctx context.Context, r *ichorv1alpha1.TalosCredentialRequest) (admission.Warnings, error) {
	user, err := requester(ctx)
	if err != nil {
		return nil, err
	}
	refusals := append(guard.ValidateCredentialRequest(r), requesterOnCreate(r, user)...)
	return v.decide(ctx, v.subject(r), refusals, guard.CredentialRequestRequirements(r))
}

// ValidateUpdate refuses a change of the requester annotation; the spec is immutable (CEL).
func (v *credentialRequestValidator) ValidateUpdate(_ context.Context, old, r *ichorv1alpha1.TalosCredentialRequest) (admission.Warnings, error) {
	if refusals := keptAnnotation(old, r, ichorv1alpha1.RequestedByAnnotation); len(refusals) > 0 {
		return nil, invalid(v.subject(r), refusals)
	}
	return nil, nil
}

func (v *credentialRequestValidator) ValidateDelete(context.Context, *ichorv1alpha1.TalosCredentialRequest) (admission.Warnings, error) {
	return nil, nil
}

// operationSubject is the subject of a decision about a TalosOperation.
func operationSubject(op *ichorv1alpha1.TalosOperation) subject {
	return subject{kind: "TalosOperation", resource: guard.ResourceTalosOperations, namespace: op.Namespace, name: op.Name, cluster: op.Spec.ClusterName}
}
