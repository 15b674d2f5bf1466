package operation

import (
	"context"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
)

// Stages of a key rotation, in order (the bundle Secret's steps are
// bundle.KeysAccept, KeysIssue, KeysDrop, KeysRename and KeysFinish). The
// new secretbox key first encrypts under a name of its own, because the old
// key's name is the prefix of every Secret it encrypted; once nothing is
// encrypted with the old key the new one takes Talos's name back
// (bundle.DefaultEncryptionKeyName) and the Secrets are written once more,
// so at the end the bundle alone says how the cluster encrypts, as it did
// before: a restore from the bundle and a snapshot needs nothing else.
const (
	keyStagePrepare   = "prepare"
	keyStageAccept    = "accept"
	keyStagePromote   = "promote"
	keyStageIssue     = "issue"
	keyStageRewrite   = "rewrite"
	keyStageTokens    = "tokens"
	keyStageRetire    = "retire"
	keyStageDrop      = "drop"
	keyStageRename    = "rename"
	keyStageApplyName = "apply-name"
	keyStageReencrypt = "reencrypt"
	keyStageFinish    = "finish"
	keyStageCleanup   = "cleanup"
)

var keyStages = []string{
	keyStagePrepare, keyStageAccept, keyStagePromote, keyStageIssue, keyStageRewrite, keyStageTokens,
	keyStageRetire, keyStageDrop, keyStageRename, keyStageApplyName, keyStageReencrypt, keyStageFinish, keyStageCleanup,
}

// keyRolloutStages go through the machines.
var keyRolloutStages = map[string]bool{keyStageAccept: true, keyStageIssue: true, keyStageDrop: true, keyStageApplyName: true, keyStageCleanup: true}

// DefaultTokenSettle is how long a key rotation lets the new
// service-account key sign before the old one stops verifying: kubelets
// re-issue a projected token when 80% of its requested lifetime (an hour by
// default) has passed, and client-go reads the file again, so after an
// hour every pod holds a token of the new key.
const DefaultTokenSettle = time.Hour

// rotatingKeyName is the name the new secretbox key encrypts under until
// it takes Talos's name.
const rotatingKeyName = "ichor-rotating"

func isKeyRotation(op *ichorv1alpha1.TalosOperation) bool {
	return op.Spec.Type == ichorv1alpha1.OperationKeyRotation
}

// keyTargets reports which keys the operation rotates (spec.keyRotation;
// both when it names neither).
func keyTargets(op *ichorv1alpha1.TalosOperation) (serviceAccount, secretbox bool) {
	if k := op.Spec.KeyRotation; k != nil && (k.ServiceAccount || k.Secretbox) {
		return k.ServiceAccount, k.Secretbox
	}

	return true, true
}

func describeKeys(op *ichorv1alpha1.TalosOperation) string {
	switch sa, box := keyTargets(op); {
	case sa && box:
		return "the service-account key and the secretbox key"
	case sa:
		return "the service-account key"
	default:
		return "the secretbox key"
	}
}

// keyRotationPhase runs the key rotation's current stage.
//
//nolint:cyclop // one case per stage
func (r *Reconciler) keyRotationPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object

	switch op.Status.Step {
	case keyStagePrepare:
		now := r.now()
		sa, box := keyTargets(op)

		return r.caSecretStep(ctx, s, "a new service-account key and secretbox key are in the bundle Secret; the new public key verifies and the new secretbox key decrypts beside the old ones",
			func(sec *corev1.Secret) (bool, error) {
				return bundle.KeysAccept(sec, s.Cluster, rotatingKeyName, func(current *secrets.Bundle) (*secrets.Bundle, error) {
					return bundle.WithNewKeys(current, now, s.Cluster.Spec.VersionContract, sa, box)
				})
			})
	case keyStageAccept, keyStageIssue, keyStageDrop, keyStageApplyName, keyStageCleanup:
		return r.keyRollout(ctx, s)
	case keyStagePromote:
		return r.caSecretStep(ctx, s, "the new keys sign and encrypt; the old ones still verify and decrypt", func(sec *corev1.Secret) (bool, error) {
			return bundle.KeysIssue(sec, s.Cluster)
		})
	case keyStageRewrite, keyStageReencrypt:
		return r.keyRewrite(ctx, s)
	case keyStageTokens:
		return r.keyTokens(ctx, s)
	case keyStageRetire:
		return r.caSecretStep(ctx, s, "the old service-account key no longer verifies and the old secretbox key is gone; the new one is also listed under Talos's name",
			func(sec *corev1.Secret) (bool, error) {
				return bundle.KeysDrop(sec, bundle.DefaultEncryptionKeyName)
			})
	case keyStageRename:
		return r.caSecretStep(ctx, s, "the new secretbox key encrypts under Talos's name "+bundle.DefaultEncryptionKeyName, func(sec *corev1.Secret) (bool, error) {
			return bundle.KeysRename(sec, bundle.DefaultEncryptionKeyName)
		})
	case keyStageFinish:
		return r.caSecretStep(ctx, s, "the bundle alone holds the keys again: the rotation's list of keys and the old bundle are gone", func(sec *corev1.Secret) (bool, error) {
			return bundle.KeysFinish(sec), nil
		})
	default:
		r.fail(op, nil, op.Status.Step, "unknown stage "+op.Status.Step)

		return ctrl.Result{}, nil
	}
}

// keyRollout runs one pass of a rollout stage; once every machine runs its
// render, it checks that the Kubernetes API reads Secrets back.
func (r *Reconciler) keyRollout(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object

	active, held, err := r.activeMachines(ctx, op)
	if err != nil {
		return ctrl.Result{}, err
	}

	if len(active) > 0 {
		return r.stepMachines(ctx, s, active)
	}

	if len(held) > 0 {
		return r.stageHeld(op, held), nil
	}

	k, res, ok := r.keyWorkload(ctx, s)
	if !ok {
		return res, nil
	}

	// A Secret written before the stage and one written now both read
	// back: every kube-apiserver decrypts with the keys it has.
	if err := readSecretsBack(ctx, k); err != nil {
		stageOf(op, op.Status.Step).Message = "after the rollout, the Kubernetes API does not read Secrets back yet: " + err.Error()

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil //nolint:nilerr // waits, with the reason in the stage's message
	}

	msgs := map[string]string{
		keyStageAccept:    "every control plane verifies tokens of the new key and decrypts with the new secretbox key",
		keyStageIssue:     "every control plane signs tokens with the new key and encrypts with the new secretbox key",
		keyStageDrop:      "the old service-account key and secretbox key are no longer in any control plane's configuration",
		keyStageApplyName: "every control plane encrypts with the new key under Talos's name",
		keyStageCleanup:   "every control plane's configuration is the bundle's alone",
	}

	return r.nextCAStage(ctx, s, msgs[op.Status.Step])
}

// keyWorkload is a client of the cluster's Kubernetes API; when there is
// none yet, ok is false and res says when to look again.
func (r *Reconciler) keyWorkload(ctx context.Context, s *scope) (kubernetes.Interface, ctrl.Result, bool) {
	op := s.Object

	b, _, err := r.loadTrust(ctx, s)
	if err != nil {
		r.fail(op, nil, op.Status.Step, err.Error())

		return nil, ctrl.Result{}, false
	}

	k, err := r.workload(ctx, op, b)
	if err != nil {
		stageOf(op, op.Status.Step).Message = "cannot reach the cluster's Kubernetes API yet: " + err.Error()

		return nil, ctrl.Result{RequeueAfter: r.PollInterval}, false
	}

	return k, ctrl.Result{}, true
}

// readSecretsBack reads one page of Secrets through the API server (each is
// decrypted on the way).
func readSecretsBack(ctx context.Context, k kubernetes.Interface) error {
	_, err := k.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 50})

	return err
}

// keyRewrite writes every Secret of the cluster again unchanged, so the
// kube-apiserver encrypts it with the key that now encrypts (Kubernetes's
// documented way: "kubectl get secrets -A -o json | kubectl replace -f -";
// a Secret read with any key but the first is stored again). In the first
// rewrite, a legacy service-account token Secret loses its token, so the
// controller-manager signs it again with the new key (the old key will stop
// verifying it). A Secret changed meanwhile is written by its own writer,
// which encrypts it with the new key too, so a conflict is not retried.
func (r *Reconciler) keyRewrite(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	sa, box := keyTargets(op)

	if !box && (!sa || op.Status.Step == keyStageReencrypt) {
		return r.nextCAStage(ctx, s, "the secretbox key is not rotated")
	}

	k, res, ok := r.keyWorkload(ctx, s)
	if !ok {
		return res, nil
	}

	written, tokens := 0, 0
	cont := ""

	for {
		list, err := k.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 250, Continue: cont})
		if err != nil {
			stageOf(op, op.Status.Step).Message = "listing the cluster's Secrets: " + err.Error()

			return ctrl.Result{RequeueAfter: r.PollInterval}, nil //nolint:nilerr // waits, with the reason in the stage's message
		}

		for i := range list.Items {
			sec := &list.Items[i]

			if sa && op.Status.Step == keyStageRewrite && sec.Type == corev1.SecretTypeServiceAccountToken && len(sec.Data[corev1.ServiceAccountTokenKey]) > 0 {
				delete(sec.Data, corev1.ServiceAccountTokenKey)

				tokens++
			} else if !box {
				continue
			}

			if _, err := k.CoreV1().Secrets(sec.Namespace).Update(ctx, sec, metav1.UpdateOptions{}); err != nil &&
				!apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				stageOf(op, op.Status.Step).Message = fmt.Sprintf("writing Secret %s/%s again: %v", sec.Namespace, sec.Name, err)

				return ctrl.Result{RequeueAfter: r.PollInterval}, nil
			}

			written++
		}

		if cont = list.Continue; cont == "" {
			break
		}
	}

	msg := fmt.Sprintf("wrote %d Secrets again, encrypted with the new secretbox key", written)
	if !box {
		msg = "the secretbox key is not rotated"
	}

	if tokens > 0 {
		msg += fmt.Sprintf("; %d legacy service-account token Secrets are signed again with the new key", tokens)
	}

	return r.nextCAStage(ctx, s, msg)
}

// keyTokens waits TokenSettle from the moment the new key signs, so every
// projected token is re-issued before the old key stops verifying.
func (r *Reconciler) keyTokens(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object

	if sa, _ := keyTargets(op); !sa {
		return r.nextCAStage(ctx, s, "the service-account key is not rotated")
	}

	since := stageOf(op, keyStageIssue).CompletedAt
	if since == nil {
		since = stageOf(op, keyStageTokens).StartedAt
	}

	if since != nil {
		if left := since.Add(r.TokenSettle).Sub(r.now()); left > 0 {
			stageOf(op, keyStageTokens).Message = fmt.Sprintf("waiting %s more for the pods' service-account tokens to be re-issued with the new key (kubelets refresh them within an hour)",
				left.Round(time.Second))

			return ctrl.Result{RequeueAfter: min(left, r.PollInterval*10)}, nil
		}
	}

	return r.nextCAStage(ctx, s, "the pods' service-account tokens had "+r.TokenSettle.String()+" to be re-issued with the new key")
}
