package operation

// The CA rotation (TalosOperation type ca-rotation; architecture, "Backup,
// recovery, certificates"; issue 24). Talos's own procedure,
// t:pkg/rotate/pki/talos/talos.go and t:pkg/rotate/pki/kubernetes/kubernetes.go
// (`talosctl rotate-ca`), in stages, each recorded in status.stages and
// status.step before it acts:
//
//   - prepare: the bundle Secret gets the next bundle (the same secrets with a
//     new Talos API CA and a new Kubernetes CA) and lists their certificates
//     as accepted (bundle.RotationAccept).
//   - accept: the render now adds the new CAs to machine.acceptedCAs and the
//     KubeAPIServerCAConfig; the configuration goes out machine by machine
//     as a config rollout does (control planes first, one at a time, each
//     kube-apiserver waited for). Then every node and every kube-apiserver
//     must let a client of the new CAs in.
//   - credentials: the operation waits in AwaitingCredentials until the
//     operator holds credentials of the new CAs (a rotation-credentials
//     TalosCredentialRequest signed by the controller marks it with
//     ichor.maesh.dev/credentials-issued): the next stage changes what the
//     servers present, and would lock out an operator with the old ones.
//   - issue: the next bundle becomes the bundle and the old CAs are accepted
//     (bundle.RotationIssue); rolled out the same way; the servers now
//     present certificates of the new CAs.
//   - root-ca: every namespace's kube-root-ca.crt carries the new Kubernetes
//     CA (in-cluster clients trust it), then a settle delay.
//   - drop: the old CAs are no longer accepted (bundle.RotationDrop); rolled out.
//   - restart-clients: the clients that keep the old CA in memory restart,
//     one at a time (CoreDNS, kube-proxy, Cilium, ichor-ui).
//   - finish: the old bundle leaves the Secret (bundle.RotationFinish).
//
// Every Secret write is idempotent (running it again after a crash between
// the write and the status write changes nothing); the Talos writes are the
// config rollout's applies, recorded before they are sent.

import (
	"cmp"
	"context"
	"crypto/tls"
	stdx509 "crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/render"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
	"github.com/maeshinshin/ichor/controller/internal/machinestate"
	ichorreconcile "github.com/maeshinshin/ichor/controller/internal/reconcile"
	"github.com/maeshinshin/ichor/controller/internal/workload"
)

// Stages of a CA rotation, in order.
const (
	caStagePrepare     = "prepare"
	caStageAccept      = "accept"
	caStageCredentials = "credentials"
	caStageIssue       = "issue"
	caStageRootCA      = "root-ca"
	caStageDrop        = "drop"
	caStageRestart     = "restart-clients"
	caStageFinish      = "finish"
)

var caStages = []string{caStagePrepare, caStageAccept, caStageCredentials, caStageIssue, caStageRootCA, caStageDrop, caStageRestart, caStageFinish}

// caRolloutStages go through the machines.
var caRolloutStages = map[string]bool{caStageAccept: true, caStageIssue: true, caStageDrop: true}

// DefaultRootCASettle is how long the rotation waits, once every namespace's
// kube-root-ca.crt carries the new Kubernetes CA, before it drops the old
// one: in-cluster clients re-read the file they mount (kubelet refreshes
// projected volumes within about a minute).
const DefaultRootCASettle = 2 * time.Minute

func isCARotation(op *ichorv1alpha1.TalosOperation) bool {
	return op.Spec.Type == ichorv1alpha1.OperationCARotation
}

// isRotation: a CA or key rotation, which covers every machine in stages.
func isRotation(op *ichorv1alpha1.TalosOperation) bool {
	return isCARotation(op) || isKeyRotation(op)
}

// rotationStages are the stages of op, a CA or key rotation, in order.
func rotationStages(op *ichorv1alpha1.TalosOperation) []string {
	if isKeyRotation(op) {
		return keyStages
	}

	return caStages
}

// isRolloutStage: the stage goes through the machines.
func isRolloutStage(op *ichorv1alpha1.TalosOperation, stage string) bool {
	if isKeyRotation(op) {
		return keyRolloutStages[stage]
	}

	return caRolloutStages[stage]
}

// describeRotation is what op rotates.
func describeRotation(op *ichorv1alpha1.TalosOperation) string {
	if isKeyRotation(op) {
		return describeKeys(op)
	}

	return describeCAs(op)
}

// caTargets reports which CAs the operation rotates (spec.caRotation; the
// Talos API and Kubernetes CAs when empty, the aggregator CA on request).
func caTargets(op *ichorv1alpha1.TalosOperation) bundle.CASet {
	set := bundle.CASet{Talos: true, Kubernetes: true}
	if c := op.Spec.CARotation; c != nil {
		if c.Talos != nil {
			set.Talos = *c.Talos
		}

		if c.Kubernetes != nil {
			set.Kubernetes = *c.Kubernetes
		}

		set.Aggregator = c.Aggregator
	}

	return set
}

func describeCAs(op *ichorv1alpha1.TalosOperation) string {
	set := caTargets(op)

	var names []string

	for _, ca := range []struct {
		on   bool
		name string
	}{{set.Talos, "the Talos API CA"}, {set.Kubernetes, "the Kubernetes CA"}, {set.Aggregator, "the aggregator CA"}} {
		if ca.on {
			names = append(names, ca.name)
		}
	}

	switch len(names) {
	case 0:
		return "no CA"
	case 1:
		return names[0]
	default:
		return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	}
}

func initCAStages(op *ichorv1alpha1.TalosOperation) {
	op.Status.Stages = nil
	for _, s := range rotationStages(op) {
		op.Status.Stages = append(op.Status.Stages, ichorv1alpha1.OperationStage{Name: s, Phase: ichorv1alpha1.StagePending})
	}
}

// startCAStage moves the rotation to stage; a rollout stage puts every
// machine back to pending in it.
func (r *Reconciler) startCAStage(op *ichorv1alpha1.TalosOperation, stage, msg string) {
	now := metav1.NewTime(r.now())
	st := stageOf(op, stage)
	st.Phase, st.StartedAt, st.Message, st.Step = ichorv1alpha1.StageInProgress, &now, msg, ""
	op.Status.Step = stage
	op.Status.ProgressSequence++

	if !isRolloutStage(op, stage) {
		return
	}

	for i := range op.Status.Machines {
		p := &op.Status.Machines[i]
		*p = ichorv1alpha1.MachineProgress{Name: p.Name, Role: p.Role, Phase: ichorv1alpha1.MachinePending, Stage: stage}
	}
}

// nextCAStage ends the current stage with msg and starts the next one.
func (r *Reconciler) nextCAStage(ctx context.Context, s *scope, msg string) (ctrl.Result, error) {
	op := s.Object
	now := metav1.NewTime(r.now())
	st := stageOf(op, op.Status.Step)
	st.Phase, st.CompletedAt, st.Message = ichorv1alpha1.StageDone, &now, msg

	stages := rotationStages(op)

	i := slices.Index(stages, op.Status.Step)
	if i < 0 || i+1 >= len(stages) {
		done := "rotated " + describeCAs(op) + ": every node accepts and presents the new CAs only, and the old bundle is gone"
		if isKeyRotation(op) {
			done = "rotated " + describeRotation(op) + ": the new ones sign and encrypt alone, every Secret is encrypted with the new key, and the old bundle is gone"
		}

		return ctrl.Result{}, r.complete(ctx, s, ichorv1alpha1.OperationSucceeded, ichorv1alpha1.SucceededReason, done)
	}

	next := stages[i+1]
	r.startCAStage(op, next, "")
	setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.ProgressingReason,
		fmt.Sprintf("rotating %s: stage %s", describeRotation(op), next))
	r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "StageStarted", "Stage", "stage %s done (%s); starting stage %s", stages[i], msg, next)

	return ichorreconcile.NextStep(), nil
}

// caRotationPhase runs the rotation's current stage.
func (r *Reconciler) caRotationPhase(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object

	// From the switch on, a restarted controller adds the CAs again.
	if i, issue := slices.Index(caStages, op.Status.Step), slices.Index(caStages, caStageIssue); i >= issue {
		if _, err := r.caSelfTrust(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	}

	switch op.Status.Step {
	case caStagePrepare:
		return r.caPrepare(ctx, s)
	case caStageAccept, caStageIssue, caStageDrop:
		return r.caRollout(ctx, s)
	case caStageCredentials:
		return r.caCredentials(ctx, s)
	case caStageRootCA:
		return r.caRootCA(ctx, s)
	case caStageRestart:
		return r.caRestartClients(ctx, s)
	case caStageFinish:
		return r.caSecretStep(ctx, s, "the old bundle was removed from the bundle Secret", func(sec *corev1.Secret) (bool, error) {
			return bundle.RotationFinish(sec), nil
		})
	default:
		r.fail(op, nil, op.Status.Step, "unknown stage "+op.Status.Step)

		return ctrl.Result{}, nil
	}
}

// caPrepare writes the next bundle into the bundle Secret and accepts its CAs.
func (r *Reconciler) caPrepare(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object
	set := caTargets(op)
	now := r.now()

	return r.caSecretStep(ctx, s, "new CAs ("+describeCAs(op)+") are in the bundle Secret, accepted beside the old ones",
		func(sec *corev1.Secret) (bool, error) {
			return bundle.RotationAccept(sec, s.Cluster, func(current *secrets.Bundle) (*secrets.Bundle, error) {
				return bundle.WithNewCAs(current, now, s.Cluster.Spec.VersionContract, set)
			})
		})
}

// caSecretStep changes the bundle Secret with change (idempotent), then
// moves to the next stage. A refusal of change (the Secret is not in the
// state the stage expects) pauses the operation.
func (r *Reconciler) caSecretStep(ctx context.Context, s *scope, done string, change func(*corev1.Secret) (bool, error)) (ctrl.Result, error) {
	op := s.Object

	sec := &corev1.Secret{}
	key := types.NamespacedName{Namespace: s.Cluster.Namespace, Name: s.Cluster.Spec.SecretsBundleRef.Name}

	if err := r.APIReader.Get(ctx, key, sec); err != nil {
		if apierrors.IsNotFound(err) {
			r.fail(op, nil, op.Status.Step, fmt.Sprintf("the secrets bundle Secret %s does not exist; restore it (ichor secrets push)", key))

			return ctrl.Result{}, nil
		}

		return ctrl.Result{}, err
	}

	changed, err := change(sec)
	if err != nil {
		// bundle's errors name the Secret and its keys, never a value.
		r.fail(op, nil, op.Status.Step, err.Error())

		return ctrl.Result{}, nil
	}

	if changed {
		// The API server refuses a write from a stale read (resourceVersion).
		if err := r.Client.Update(ctx, sec); err != nil {
			return ctrl.Result{}, fmt.Errorf("update the secrets bundle Secret %s: %w", key, err)
		}

		r.Recorder.Eventf(op, nil, corev1.EventTypeNormal, "BundleUpdated", "Rotate", "stage %s: %s", op.Status.Step, done)
	}

	return r.nextCAStage(ctx, s, done)
}

// caRollout runs one pass of a rollout stage; once every machine runs its
// render, it checks that the nodes and the API servers let the stage's
// clients in, then moves the Secret on for the next stage.
func (r *Reconciler) caRollout(ctx context.Context, s *scope) (ctrl.Result, error) {
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

	if msg := r.caVerify(ctx, s); msg != "" {
		r.fail(op, nil, op.Status.Step, msg)

		return ctrl.Result{}, nil
	}

	switch op.Status.Step {
	case caStageAccept:
		return r.nextCAStage(ctx, s, "every node and kube-apiserver accepts clients of the new CAs")
	case caStageIssue:
		return r.nextCAStage(ctx, s, "every node and kube-apiserver presents certificates of the new CAs and still accepts the old ones")
	default: // drop
		return r.nextCAStage(ctx, s, "the old CAs are no longer accepted")
	}
}

// caCredentials waits for the hand-over of credentials of the new CAs; once
// they are issued it makes the next bundle the bundle.
func (r *Reconciler) caCredentials(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object

	// An aggregator CA rotation alone changes no credential of the operator's.
	if set := caTargets(op); !set.Talos && !set.Kubernetes {
		return r.caSecretStep(ctx, s, "the aggregator CA is the only one rotated: the operator's credentials do not change; the new CA issues, the old one stays accepted",
			func(sec *corev1.Secret) (bool, error) {
				return bundle.RotationIssue(sec, s.Cluster)
			})
	}

	if op.Annotations[ichorv1alpha1.CredentialsIssuedAnnotation] == "" {
		op.Status.Phase = ichorv1alpha1.OperationAwaitingCredentials
		msg := fmt.Sprintf("every node accepts the new CAs; waiting until the operator holds credentials of them before the servers switch: "+
			"`ichor cluster rotate-ca %s --operation %s` stores them, or the console's page of this operation downloads them "+
			"(both ask the controller through a rotation-credentials TalosCredentialRequest; needs `download` on talosclusters/credentials)",
			op.Spec.ClusterName, op.Name)
		stageOf(op, caStageCredentials).Message = msg
		setCond(op, ichorv1alpha1.ReadyCondition, metav1.ConditionFalse, ichorv1alpha1.AwaitingCredentialsReason, msg)

		return ctrl.Result{RequeueAfter: r.LockWait * 6}, nil
	}

	// Ahead of the switch, the controller's own client trusts the new
	// Kubernetes CA when this is the cluster it runs in.
	self, err := r.caSelfTrust(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}

	op.Status.Phase = ichorv1alpha1.OperationRunning

	return r.caSecretStep(ctx, s, "credentials of the new CAs were handed out ("+op.Annotations[ichorv1alpha1.CredentialsIssuedAnnotation]+
		"); the new CAs issue, the old ones stay accepted"+self, func(sec *corev1.Secret) (bool, error) {
		return bundle.RotationIssue(sec, s.Cluster)
	})
}

// caSelfTrust makes the controller's own Kubernetes client trust every
// Kubernetes CA the cluster accepts (the old and the new during the
// rotation), when the Kubernetes CA rotates and the cluster is the one the
// controller runs in: from stage issue on the kube-apiservers present the
// new CA's certificate before kube-root-ca.crt, the client's CA file,
// carries it (selftrust). It says what it did, for the stage's message:
// empty when there was nothing to do. Once per stage and process.
func (r *Reconciler) caSelfTrust(ctx context.Context, s *scope) (string, error) {
	op := s.Object
	if r.SelfTrust == nil || !caTargets(op).Kubernetes {
		return "", nil
	}

	key := string(op.UID) + "/" + op.Status.Step
	if _, done := r.selfTrusted.Load(key); done {
		return "", nil
	}

	local, err := machinestate.RunsOn(ctx, r.Client, s.Cluster, r.OwnNode)
	if err != nil || !local {
		return "", err
	}

	b, accepted, err := r.loadTrust(ctx, s)
	if err != nil {
		return "", err
	}

	if err := r.SelfTrust.Trust(accepted.KubernetesPEM(b.Certs.K8s.Crt)); err != nil {
		return "", fmt.Errorf("the controller's own client cannot trust the cluster's Kubernetes CAs: %w", err)
	}

	r.selfTrusted.Store(key, true)

	return "; the controller runs in this cluster and its own Kubernetes client trusts the new Kubernetes CA", nil
}

// caVerify checks, after a rollout stage, what talosctl's verifyConnectivity
// checks: every node answers a client of the CA the stage needs, and so does
// every kube-apiserver. An empty result is success.
func (r *Reconciler) caVerify(ctx context.Context, s *scope) string {
	op := s.Object

	b, accepted, err := r.loadTrust(ctx, s)
	if err != nil {
		return err.Error()
	}

	// After accept the client to prove is the new CAs' (the next bundle's);
	// after issue and drop the bundle is the new one.
	client := b
	if op.Status.Step == caStageAccept {
		sec, err := r.bundleSecret(ctx, s)
		if err != nil {
			return err.Error()
		}

		if client, err = bundle.LoadNext(sec, s.Cluster); err != nil {
			return err.Error()
		}
	}

	talosTrust := accepted.TalosPEM(b.Certs.OS.Crt)
	kubeTrust := accepted.KubernetesPEM(b.Certs.K8s.Crt)

	var problems []string

	for _, p := range op.Status.Machines {
		if p.Phase != ichorv1alpha1.MachineDone && p.Phase != ichorv1alpha1.MachineSkipped {
			continue
		}

		m, err := r.machine(ctx, op, p.Name)
		if err != nil || m == nil || m.Spec.Address == "" {
			continue
		}

		if err := talosAnswers(ctx, m.Spec.Address, r.Nodes.Port, client, talosTrust); err != nil {
			problems = append(problems, fmt.Sprintf("%s does not let a Talos client of the new CA in: %s", m.Name, talos.Message(err)))
		}
	}

	// The Kubernetes API through the cluster's endpoint (each control
	// plane's kube-apiserver was waited for by its rollout step).
	if endpoint, err := render.Endpoint(s.Cluster.Spec.Endpoint); err != nil {
		problems = append(problems, err.Error())
	} else if err := kubeAnswers(ctx, endpoint, client.Certs.K8s, kubeTrust); err != nil {
		problems = append(problems, fmt.Sprintf("the Kubernetes API at %s does not let a client of the new Kubernetes CA in: %v", endpoint, err))
	}

	if len(problems) > 0 {
		return "after stage " + op.Status.Step + ": " + strings.Join(problems, "; ")
	}

	return ""
}

func (r *Reconciler) bundleSecret(ctx context.Context, s *scope) (*corev1.Secret, error) {
	sec := &corev1.Secret{}
	key := types.NamespacedName{Namespace: s.Cluster.Namespace, Name: s.Cluster.Spec.SecretsBundleRef.Name}

	if err := r.APIReader.Get(ctx, key, sec); err != nil {
		return nil, fmt.Errorf("read the secrets bundle Secret %s: %w", key, err)
	}

	return sec, nil
}

// loadTrust is the bundle and the accepted CAs as every reader of the
// bundle Secret sees them (machinestate.LoadTrust).
func (r *Reconciler) loadTrust(ctx context.Context, s *scope) (*secrets.Bundle, bundle.Accepted, error) {
	return machinestate.LoadTrust(ctx, r.APIReader, s.Cluster)
}

// talosAnswers reads the Talos version of the node at address with an
// os:reader certificate of b's Talos API CA, trusting trust.
func talosAnswers(ctx context.Context, address string, port int, b *secrets.Bundle, trust []byte) error {
	pemCert, err := b.GenerateTalosAPIClientCertificateWithTTL(role.MakeSet(role.Reader), 10*time.Minute)
	if err != nil {
		return err
	}

	cert, err := tls.X509KeyPair(pemCert.Crt, pemCert.Key)
	if err != nil {
		return err
	}

	roots := stdx509.NewCertPool()
	roots.AppendCertsFromPEM(trust)

	c, err := talos.DialWithCertificate(ctx, address, port, cert, roots)
	if err != nil {
		return err
	}

	defer c.Close() //nolint:errcheck

	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()

	_, err = c.Version(cctx)

	return err
}

// kubeAnswers lists one namespace from the Kubernetes API at endpoint with a
// client certificate of ca, trusting trust.
func kubeAnswers(ctx context.Context, endpoint string, ca *x509.PEMEncodedCertificateAndKey, trust []byte) error {
	authority, err := x509.NewCertificateAuthorityFromCertificateAndKey(ca)
	if err != nil {
		return errors.New("the Kubernetes CA does not parse")
	}

	pair, err := x509.NewKeyPair(authority, x509.CommonName("ichor:ca-rotation-check"), x509.Organization("system:masters"),
		x509.NotAfter(time.Now().Add(10*time.Minute)), x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}))
	if err != nil {
		return err
	}

	k, err := kubernetes.NewForConfig(&rest.Config{
		Host:            endpoint,
		TLSClientConfig: rest.TLSClientConfig{CAData: trust, CertData: pair.CrtPEM, KeyData: pair.KeyPEM},
		Timeout:         workload.Timeout,
	})
	if err != nil {
		return err
	}

	_, err = k.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: 1})

	return err
}

// caRootCA waits until every namespace's kube-root-ca.crt carries the new
// Kubernetes CA (the controller-manager publishes the issuing CA), then the
// settle delay.
func (r *Reconciler) caRootCA(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object

	if !caTargets(op).Kubernetes {
		return r.nextCAStage(ctx, s, "the Kubernetes CA is not rotated")
	}

	st := stageOf(op, caStageRootCA)
	if st.Step == "settle" {
		settle := r.rootCASettle()
		if st.StartedAt != nil && r.now().Before(st.StartedAt.Add(settle)) {
			return ctrl.Result{RequeueAfter: time.Until(st.StartedAt.Add(settle))}, nil
		}

		return r.caSecretStep(ctx, s, "the old CAs are dropped from the accepted ones", func(sec *corev1.Secret) (bool, error) {
			return bundle.RotationDrop(sec), nil
		})
	}

	b, _, err := r.loadTrust(ctx, s)
	if err != nil {
		r.fail(op, nil, op.Status.Step, err.Error())

		return ctrl.Result{}, nil
	}

	k, err := r.workload(ctx, op, b)
	if err != nil {
		st.Message = "cannot reach the cluster's Kubernetes API yet: " + err.Error()

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil //nolint:nilerr // waits, with the reason in the stage's message
	}

	var missing []string

	nss, err := k.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		st.Message = "cannot list the namespaces yet: " + err.Error()

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil //nolint:nilerr // waits, with the reason in the stage's message
	}

	for _, ns := range nss.Items {
		cm, err := k.CoreV1().ConfigMaps(ns.Name).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err != nil || !strings.Contains(cm.Data["ca.crt"], strings.TrimSpace(string(b.Certs.K8s.Crt))) {
			missing = append(missing, ns.Name)
		}
	}

	if len(missing) > 0 {
		st.Message = fmt.Sprintf("waiting for the new Kubernetes CA in kube-root-ca.crt of %d namespace(s): %s", len(missing), strings.Join(firstPaths(missing, 5), ", "))

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil
	}

	now := metav1.NewTime(r.now())
	st.Step, st.StartedAt = "settle", &now
	st.Message = fmt.Sprintf("every namespace's kube-root-ca.crt carries the new Kubernetes CA; settling for %s before the old CA is dropped", r.rootCASettle())
	op.Status.ProgressSequence++

	return ctrl.Result{RequeueAfter: r.rootCASettle()}, nil
}

func (r *Reconciler) rootCASettle() time.Duration { return cmp.Or(r.RootCASettle, DefaultRootCASettle) }

const kindDeployment = "Deployment"

// caClients are the in-cluster clients that read the Kubernetes CA once
// and keep it (architecture: CoreDNS, kube-proxy, the CNI, ichor-ui).
var caClients = []struct{ namespace, kind, name string }{
	{kubeProxyNamespace, kindDeployment, "coredns"},
	{kubeProxyNamespace, kindDaemonSet, "kube-proxy"},
	{kubeProxyNamespace, kindDaemonSet, "cilium"},
	{kubeProxyNamespace, kindDeployment, "cilium-operator"},
	{"ichor-system", kindDeployment, "ichor-ui"},
}

// caRestartClients restarts, one at a time, the clients that keep the old
// Kubernetes CA (a restartedAt annotation on the pod template, as `kubectl
// rollout restart` writes it), waiting for each to be rolled out. Those the
// cluster does not run are skipped.
func (r *Reconciler) caRestartClients(ctx context.Context, s *scope) (ctrl.Result, error) {
	op := s.Object

	if !caTargets(op).Kubernetes {
		return r.nextCAStage(ctx, s, "the Kubernetes CA is not rotated")
	}

	st := stageOf(op, caStageRestart)

	b, _, err := r.loadTrust(ctx, s)
	if err != nil {
		r.fail(op, nil, op.Status.Step, err.Error())

		return ctrl.Result{}, nil
	}

	k, err := r.workload(ctx, op, b)
	if err != nil {
		st.Message = "cannot reach the cluster's Kubernetes API yet: " + err.Error()

		return ctrl.Result{RequeueAfter: r.PollInterval}, nil //nolint:nilerr // waits, with the reason in the stage's message
	}

	var restarted []string

	for _, c := range caClients {
		done, progress, err := restartWorkload(ctx, k, c.namespace, c.kind, c.name, "ichor-ca-rotation-"+op.Name)
		if err != nil {
			st.Message = fmt.Sprintf("restarting %s %s/%s: %v", c.kind, c.namespace, c.name, err)

			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}

		if !done {
			st.Message = fmt.Sprintf("waiting for %s %s/%s to roll out with the new Kubernetes CA (%s)", c.kind, c.namespace, c.name, progress)

			return ctrl.Result{RequeueAfter: r.PollInterval}, nil
		}

		restarted = append(restarted, c.namespace+"/"+c.name)
	}

	msg := "restarted the clients that keep the Kubernetes CA they started with"
	if len(restarted) > 0 {
		msg += ": " + strings.Join(restarted, ", ")
	}

	return r.nextCAStage(ctx, s, msg)
}

// restartWorkload stamps the pod template of a Deployment or DaemonSet with
// restartedAt (once, as `kubectl rollout restart` does) and reports whether
// it is rolled out with it, and how far (its status counts, for the stage's
// message): its controller saw the new template and every
// replica is updated, and, for a workload whose replicas were all available
// when it was stamped, available again. One that was not available before
// is not waited for to become so (the stamp records which: "/unavailable").
// A workload the cluster does not run counts as done.
func restartWorkload(ctx context.Context, k kubernetes.Interface, namespace, kind, name, stamp string) (done bool, progress string, err error) {
	const key = "kubectl.kubernetes.io/restartedAt"

	unavailable := stamp + "/unavailable"
	patch := func(value string) []byte {
		return []byte(`{"spec":{"template":{"metadata":{"annotations":{"` + key + `":"` + value + `"}}}}}`)
	}

	switch kind {
	case kindDeployment:
		d, err := k.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}

		if err != nil {
			return false, "", err
		}

		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}

		got := d.Spec.Template.Annotations[key]
		if got != stamp && got != unavailable {
			value := stamp
			if d.Status.AvailableReplicas < want {
				value = unavailable
			}

			_, err := k.AppsV1().Deployments(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch(value), metav1.PatchOptions{FieldManager: ControllerName})

			return false, "stamped the pod template", err
		}

		updated := d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want && d.Status.Replicas == want

		progress = fmt.Sprintf("%d of %d replicas updated, %d in all, %d available; controller at generation %d of %d",
			d.Status.UpdatedReplicas, want, d.Status.Replicas, d.Status.AvailableReplicas, d.Status.ObservedGeneration, d.Generation)

		return updated && (got == unavailable || d.Status.AvailableReplicas >= want), progress, nil
	default:
		ds, err := k.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}

		if err != nil {
			return false, "", err
		}

		got := ds.Spec.Template.Annotations[key]
		if got != stamp && got != unavailable {
			value := stamp
			if ds.Status.NumberAvailable < ds.Status.DesiredNumberScheduled {
				value = unavailable
			}

			_, err := k.AppsV1().DaemonSets(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch(value), metav1.PatchOptions{FieldManager: ControllerName})

			return false, "stamped the pod template", err
		}

		updated := ds.Status.ObservedGeneration >= ds.Generation && ds.Status.UpdatedNumberScheduled == ds.Status.DesiredNumberScheduled

		progress = fmt.Sprintf("%d of %d pods updated, %d available; controller at generation %d of %d",
			ds.Status.UpdatedNumberScheduled, ds.Status.DesiredNumberScheduled, ds.Status.NumberAvailable, ds.Status.ObservedGeneration, ds.Generation)

		return updated && (got == unavailable || ds.Status.NumberAvailable >= ds.Status.DesiredNumberScheduled), progress, nil
	}
}
