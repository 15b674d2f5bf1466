// Package adoptflow is the writing half of `ichor adopt` (architecture,
// "ichor adopt"): phase 2, which stores the secrets bundle, installs Ichor
// and writes the cluster's resources with every TalosMachine held, and phase
// 4, which releases the holds one machine at a time, control planes first,
// each after a live check that the node differs from its render only in what
// the first render changes. Nothing is sent to a node before the release,
// and the release itself sends nothing: the controller applies the first
// render once a hold is lifted. The read-only plan (phase 1) and every
// decision are contracts/pkg/adopt's.
//
// Each step looks at what exists first, so a run after a failure continues
// where the last one stopped, and an object that exists and is not the
// adoption's stops the run before it changes anything.
package adoptflow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/maeshinshin/ichor/cli/internal/initflow"
	"github.com/maeshinshin/ichor/cli/internal/kube"
	"github.com/maeshinshin/ichor/cli/internal/secretstore"
	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/adopt"
	"github.com/maeshinshin/ichor/contracts/pkg/bundle"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/talos"
)

// FieldOwner is the adoption's field manager.
const FieldOwner = "ichor-adopt"

// Options are the write phase's inputs besides the plan.
type Options struct {
	// Namespace is where the cluster's resources go.
	Namespace string
	// Install and InstallerImage: how Ichor is installed (initflow's modes).
	Install, InstallerImage string
	// WriteKubeconfig also writes the admin kubeconfig there.
	WriteKubeconfig string
	// TalosPort is the Talos API port; zero is 50000.
	TalosPort int
	// Talosconfig is the operator's own talosconfig (its credentials read
	// the admin kubeconfig from a control plane).
	Talosconfig []byte
	// Bundle is the cluster's secrets bundle.
	Bundle *secrets.Bundle
}

// Env is what the write phase runs with.
type Env struct {
	// Store is the cluster's secrets store.
	Store *secretstore.Store
	// Passphrase reads an existing store's passphrase; NewPassphrase gets one
	// for a new store.
	Passphrase    secretstore.Passphrase
	NewPassphrase func() (pass string, generated bool, err error)
	// Progress shows the steps; Out receives the summary.
	Progress *initflow.Progress
	Out      io.Writer
	// Version is this CLI's version.
	Version string
}

type state struct {
	o    Options
	env  Env
	p    *initflow.Progress
	plan *adopt.Plan
	objs *adopt.Objects

	pass       string
	bundleYAML []byte
	kubeconfig []byte
	conn       *kube.Conn
}

// step is one step of the write.
type step struct {
	title string
	do    func(context.Context) error
}

// Write runs phase 2 of the plan p, whose objects are objs.
func Write(ctx context.Context, p *adopt.Plan, objs *adopt.Objects, o Options, env Env) error {
	s := &state{o: o, env: env, p: env.Progress, plan: p, objs: objs}

	data, err := bundle.Encode(o.Bundle)
	if err != nil {
		return err
	}

	s.bundleYAML = data

	steps := []step{
		{"Secrets bundle in " + env.Store.Dir, s.storeBundle},
		{"Admin kubeconfig from " + s.firstControlPlane(), s.credentials},
		{"Kubernetes API", s.connect},
	}

	// No CNI: Cilium first, or Ichor's pods could not start.
	if ci := p.CiliumInstall; ci != nil {
		steps = append(steps, step{ciliumInstallTitle(objs.Cluster, ci.Chart), s.installCilium})
	}

	steps = append(steps, step{initflow.InstallTitle(initflow.Options{Namespace: o.Namespace, Install: o.Install, InstallerImage: o.InstallerImage},
		initflow.Env{Version: env.Version}), s.install})

	if t := p.CiliumTakeover; t != nil && len(t.PriorRelease) > 0 {
		steps = append(steps, step{fmt.Sprintf("Helm's records of release %s/%s kept in %s/%s, then deleted", cilium.Namespace, cilium.ReleaseName, o.Namespace, adopt.PriorReleaseSecret),
			s.keepPriorRelease})
	}

	steps = append(steps, step{fmt.Sprintf("Bundle Secret, TalosCluster, %d TalosConfigPatch(es), %d TalosMachine(s) held (%s=%s)",
		len(objs.Patches), len(objs.Machines), ichorv1alpha1.HoldApplyAnnotation, adopt.HoldValue), s.resources})

	for _, st := range steps {
		s.p.Step(st.title)

		if err := st.do(ctx); err != nil {
			s.p.Fail()

			return err
		}
	}

	s.p.Done()
	s.summary()

	return nil
}

func (s *state) firstControlPlane() string {
	for _, m := range s.objs.Machines {
		if m.Spec.Role == ichorv1alpha1.RoleControlPlane {
			return m.Spec.Address
		}
	}

	return ""
}

func (s *state) passphrase() (string, error) {
	if s.pass != "" {
		return s.pass, nil
	}

	p, err := s.env.Passphrase()
	if err != nil {
		return "", err
	}

	s.pass = p

	return p, nil
}

// storeBundle stores the bundle, encrypted, in the cluster's store; a store
// that holds a bundle already must hold this one (a second run continues).
func (s *state) storeBundle(_ context.Context) error {
	st, err := s.env.Store.Status()
	if err != nil {
		return fmt.Errorf("reading the secrets store %s: %w", s.env.Store.Dir, err)
	}

	for _, f := range st {
		if f.Name != secretstore.FileBundle || (!f.Encrypted && !f.Plaintext) {
			continue
		}

		have, err := s.env.Store.Read(secretstore.FileBundle, s.passphrase)
		if err != nil {
			return fmt.Errorf("%s holds a secrets bundle already: %w", s.env.Store.Dir, err)
		}

		if !sameBundle(have, s.bundleYAML, s.objs.Cluster.Spec.VersionContract) {
			return fmt.Errorf("%s holds another cluster's secrets bundle: adopt this cluster under another name, or move that directory away if it is a leftover",
				s.env.Store.Dir)
		}

		s.p.Detailf("continuing with the bundle stored in %s", s.env.Store.Dir)

		return nil
	}

	pass, generated, err := s.env.NewPassphrase()
	if err != nil {
		return err
	}

	if err := s.env.Store.Save(secretstore.Contents{Bundle: s.bundleYAML}, pass); err != nil {
		return fmt.Errorf("storing the secrets bundle in %s: %w", s.env.Store.Dir, err)
	}

	s.pass = pass

	if generated {
		s.p.Notef("\nThe generated passphrase of %s (shown only now; Ichor does not keep it, store it in your password manager):\n\n    %s\n", s.env.Store.Dir, pass)
	}

	s.p.Notef("Back up %s now, and keep the passphrase apart from it: the bundle holds the cluster's CA keys.", s.env.Store.Dir)

	return nil
}

// sameBundle compares two bundle files by what they hold (their encodings
// after a decode), not by their spelling.
func sameBundle(a, b []byte, contract string) bool {
	ba, err := bundle.Decode(a, contract)
	if err != nil {
		return false
	}

	bb, err := bundle.Decode(b, contract)
	if err != nil {
		return false
	}

	ea, errA := bundle.Encode(ba)
	eb, errB := bundle.Encode(bb)

	return errA == nil && errB == nil && bytes.Equal(ea, eb)
}

// credentials reads the admin kubeconfig from a control plane with the
// operator's talosconfig, as `talosctl kubeconfig` does, and stores it with
// an os:admin talosconfig issued from the bundle.
func (s *state) credentials(ctx context.Context) error {
	addr := s.firstControlPlane()

	kc, err := AdminKubeconfig(ctx, addr, s.o.TalosPort, s.o.Talosconfig, s.o.Namespace, 5*time.Minute)
	if err != nil {
		return err
	}

	tc, err := initflow.Talosconfig(s.objs.Cluster.Name, addr, s.o.Bundle)
	if err != nil {
		return err
	}

	pass, err := s.passphrase()
	if err != nil {
		return err
	}

	if err := s.env.Store.Save(secretstore.Contents{Kubeconfig: kc, Talosconfig: tc}, pass); err != nil {
		return fmt.Errorf("storing the kubeconfig and talosconfig in %s: %w", s.env.Store.Dir, err)
	}

	s.kubeconfig = kc

	if s.o.WriteKubeconfig != "" {
		if err := initflow.WritePrivate(s.o.WriteKubeconfig, kc); err != nil {
			return fmt.Errorf("writing the kubeconfig to %s: %w", s.o.WriteKubeconfig, err)
		}

		s.p.Detailf("stored in %s; also written to %s (mode 0600)", s.env.Store.Dir, s.o.WriteKubeconfig)
	} else {
		s.p.Detailf("stored in %s", s.env.Store.Dir)
	}

	return nil
}

// AdminKubeconfig reads the admin kubeconfig from the control plane at addr
// with the operator's talosconfig, as `talosctl kubeconfig` does (a read),
// its contexts set to namespace. A cluster just bootstrapped serves it once
// its API server certificates exist: it is asked again for up to wait.
func AdminKubeconfig(ctx context.Context, addr string, port int, talosconfig []byte, namespace string, wait time.Duration) ([]byte, error) {
	var (
		kc   []byte
		last error
	)

	err := initflow.Poll(ctx, wait, func(ctx context.Context) (bool, error) {
		n, err := talos.DialTalosconfigNode(ctx, addr, port, talosconfig)
		if err != nil {
			last = err

			return false, nil
		}
		defer n.Close()

		kc, last = n.Kubeconfig(ctx)

		return last == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the admin kubeconfig from %s with your talosconfig: %s; run the same command again to continue", addr, talos.Message(errors.Join(last, err)))
	}

	cfg, err := clientcmd.Load(kc)
	if err != nil {
		return nil, errors.New("the node's admin kubeconfig does not parse")
	}

	for _, c := range cfg.Contexts {
		c.Namespace = namespace
	}

	return clientcmd.Write(*cfg)
}

func (s *state) connect(ctx context.Context) error {
	conn, err := initflow.Connect(ctx, s.kubeconfig, s.o.Namespace, s.p)
	if err != nil {
		return err
	}

	s.conn = conn

	return nil
}

// install installs Ichor, unless Helm manages the Ichor that runs there
// (architecture, "ichor adopt": a Helm-installed Ichor is registered with,
// not installed over, and must be this CLI's version).
func (s *state) install(ctx context.Context) error {
	inst := &ichorv1alpha1.IchorInstallation{}

	switch err := s.conn.Client.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, inst); {
	case err == nil:
		skip, err := helmManaged(inst, s.env.Version)
		if err != nil {
			return err
		}

		if skip {
			s.p.Detailf("Ichor %s runs, installed with Helm: the install step is skipped (Helm upgrades it)", inst.Status.InstalledVersion)

			return nil
		}
	case !apierrors.IsNotFound(err) && !apimeta.IsNoMatchError(err):
		return s.conn.Explain(err, "reading the IchorInstallation (a Helm-installed Ichor is not installed over)")
	}

	return initflow.InstallInto(ctx, s.kubeconfig,
		initflow.Options{Namespace: s.o.Namespace, Install: s.o.Install, InstallerImage: s.o.InstallerImage},
		initflow.Env{Store: s.env.Store, Progress: s.p, Out: s.env.Out, Version: s.env.Version})
}

func (s *state) retry(ctx context.Context, f func(context.Context) error) error {
	return initflow.Retry(ctx, s.conn, s.p, f)
}

// create creates obj, or checks with same that the one that exists is the
// adoption's (a second run continues; anything else stops the run).
func (s *state) create(ctx context.Context, obj client.Object, same func(existing client.Object) error) error {
	kind := fmt.Sprintf("%T", obj)
	kind = kind[strings.LastIndex(kind, ".")+1:]

	var verdict error

	err := s.retry(ctx, func(ctx context.Context) error {
		err := s.conn.Client.Create(ctx, obj.DeepCopyObject().(client.Object), client.FieldOwner(FieldOwner))
		if !apierrors.IsAlreadyExists(err) {
			return err
		}

		existing := obj.DeepCopyObject().(client.Object)
		if err := s.conn.Client.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
			return err
		}

		verdict = same(existing)

		return nil
	})
	if err != nil {
		return s.conn.Explain(err, "creating "+kind+" "+obj.GetName())
	}

	if verdict != nil {
		return verdict
	}

	s.p.Detailf("%s %s", kind, obj.GetName())

	return nil
}

// adopted is the check of an object that exists: it must carry the
// adoption's mark.
func adopted(kind string, ok func(client.Object) bool) func(client.Object) error {
	return func(existing client.Object) error {
		if ok(existing) {
			return nil
		}

		return fmt.Errorf("%s %s/%s exists and was not written by `ichor adopt`: adoption writes no object over another; "+
			"adopt under another cluster name, or remove that object if it is a leftover", kind, existing.GetNamespace(), existing.GetName())
	}
}

// resources writes the bundle Secret, the TalosCluster, the patches and the
// held machines, each with the status a provisioned machine has, so that
// the controller follows each node as its own (identity, etcd member, Node)
// and reports its drift while the hold stops every apply.
func (s *state) resources(ctx context.Context) error {
	c := s.objs.Cluster
	ref := c.Spec.SecretsBundleRef

	sec, err := bundle.Secret(s.o.Namespace, ref, s.o.Bundle)
	if err != nil {
		return err
	}

	sec.Data[bundle.Key(ref)] = s.bundleYAML
	sec.Labels = map[string]string{ichorv1alpha1.ClusterLabel: c.Name}

	if err := s.create(ctx, sec, func(existing client.Object) error {
		if !sameBundle(existing.(*corev1.Secret).Data[bundle.Key(ref)], s.bundleYAML, c.Spec.VersionContract) {
			return fmt.Errorf("the Secret %s/%s exists and holds another secrets bundle: it belongs to another cluster; "+
				"adopt under another cluster name, or delete that Secret if it is a leftover", s.o.Namespace, ref.Name)
		}

		return nil
	}); err != nil {
		return err
	}

	if err := s.create(ctx, c.DeepCopy(), adopted("TalosCluster", func(o client.Object) bool {
		return o.GetAnnotations()[ichorv1alpha1.AdoptedAnnotation] != ""
	})); err != nil {
		return err
	}

	if err := s.advise(ctx); err != nil {
		return err
	}

	return s.writeMachines(ctx, s.objs.Patches, s.objs.Machines, s.talosVersion)
}

// talosVersion is the version the plan read on m's node.
func (s *state) talosVersion(m *ichorv1alpha1.TalosMachine) string {
	for _, mp := range s.plan.Machines {
		if mp.Address == m.Spec.Address {
			return mp.TalosVersion
		}
	}

	return ""
}

// writeMachines creates each machine's patch and the machine, held, with
// its status.
func (s *state) writeMachines(ctx context.Context, patches []*ichorv1alpha1.TalosConfigPatch, machines []*ichorv1alpha1.TalosMachine, version func(*ichorv1alpha1.TalosMachine) string) error {
	for _, p := range patches {
		if err := s.create(ctx, p.DeepCopy(), adopted("TalosConfigPatch", func(o client.Object) bool {
			return o.GetLabels()[ichorv1alpha1.ClusterLabel] == p.Spec.ClusterName && strings.HasPrefix(o.GetName(), adopt.PatchPrefix)
		})); err != nil {
			return err
		}
	}

	who, err := s.conn.WhoAmI(ctx)
	if err != nil {
		who = FieldOwner
	}

	now := metav1.Now()

	for _, m := range machines {
		m = m.DeepCopy()
		m.Spec.Approval.DecidedBy, m.Spec.Approval.DecidedAt = who, &now

		if err := s.create(ctx, m, adopted("TalosMachine", func(o client.Object) bool {
			tm := o.(*ichorv1alpha1.TalosMachine)

			return tm.Spec.Identity.UUID == m.Spec.Identity.UUID && tm.Spec.ClusterName == m.Spec.ClusterName
		})); err != nil {
			return err
		}

		if err := s.machineStatus(ctx, m, version(m)); err != nil {
			return err
		}
	}

	return nil
}

// advise sets CARotationAdvised on the TalosCluster (the previous
// administrators' client certificates stay valid) and records the inline
// manifest entry of a Cilium taken over.
func (s *state) advise(ctx context.Context) error {
	c := s.objs.Cluster

	return s.retry(ctx, func(ctx context.Context) error {
		cur := &ichorv1alpha1.TalosCluster{}
		if err := s.conn.Client.Get(ctx, client.ObjectKeyFromObject(c), cur); err != nil {
			return err
		}

		if apimeta.FindStatusCondition(cur.Status.Conditions, ichorv1alpha1.CARotationAdvisedCondition) != nil &&
			cur.Status.CNI.TakenOverInlineManifest == c.Status.CNI.TakenOverInlineManifest {
			return nil
		}

		before := cur.DeepCopy()
		// The foreign inline entry the takeover replaces, found by content.
		cur.Status.CNI.TakenOverInlineManifest = c.Status.CNI.TakenOverInlineManifest
		apimeta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{
			Type: ichorv1alpha1.CARotationAdvisedCondition, Status: metav1.ConditionTrue, Reason: "Adopted", ObservedGeneration: cur.Generation,
			Message: "the cluster was adopted: the client certificates its previous administrators hold stay valid until the CAs are rotated " +
				"(ichor cluster rotate-ca " + c.Name + ")",
		})

		return s.conn.Client.Status().Patch(ctx, cur, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
}

// machineStatus records that the node runs its configuration already (it
// was configured before Ichor): the controller follows it to Provisioned
// instead of sending a configuration, and applies nothing while it is held.
// A controller that runs already may have seen the machine before its
// status said so (and, held, waits for no event a status write makes), so
// the reconcile-requested annotation is set afterwards.
func (s *state) machineStatus(ctx context.Context, m *ichorv1alpha1.TalosMachine, talosVersion string) error {
	if err := s.writeStatus(ctx, m, talosVersion); err != nil {
		return err
	}

	return s.retry(ctx, func(ctx context.Context) error {
		cur := &ichorv1alpha1.TalosMachine{}
		if err := s.conn.Client.Get(ctx, client.ObjectKeyFromObject(m), cur); err != nil {
			return err
		}

		before := cur.DeepCopy()
		metav1.SetMetaDataAnnotation(&cur.ObjectMeta, ichorv1alpha1.ReconcileRequestedAnnotation, time.Now().UTC().Format(time.RFC3339Nano))

		return s.conn.Client.Patch(ctx, cur, client.MergeFrom(before), client.FieldOwner(FieldOwner))
	})
}

// writeStatus writes the status of a machine that runs its configuration.
func (s *state) writeStatus(ctx context.Context, m *ichorv1alpha1.TalosMachine, talosVersion string) error {
	return s.retry(ctx, func(ctx context.Context) error {
		cur := &ichorv1alpha1.TalosMachine{}
		if err := s.conn.Client.Get(ctx, client.ObjectKeyFromObject(m), cur); err != nil {
			return err
		}

		if cur.Status.ConfigSentAt != nil {
			return nil
		}

		before := cur.DeepCopy()
		now := metav1.Now()
		cur.Status.ConfigSentAt = &now
		cur.Status.Stage = ichorv1alpha1.StageRunning
		cur.Status.TalosVersion = talosVersion

		apimeta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{
			Type: ichorv1alpha1.ProvisionedCondition, Status: metav1.ConditionFalse, Reason: ichorv1alpha1.JoiningReason,
			Message:            "adopted: the node runs the configuration it had; waiting for the controller to confirm it (identity, etcd member, Ready Node)",
			ObservedGeneration: cur.Generation,
		})
		ichorv1alpha1.SummarizeTalosMachine(cur)

		return s.conn.Client.Status().Patch(ctx, cur, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
}

func (s *state) summary() {
	w := s.env.Out
	c := s.objs.Cluster

	_, _ = fmt.Fprintf(w, "\nCluster %s is adopted and held: every TalosMachine carries %s=%s, so the controller compares each node with its render "+
		"and applies nothing (`ichor machine list`, condition AdoptionHeld).\n", c.Name, ichorv1alpha1.HoldApplyAnnotation, adopt.HoldValue)

	if len(s.objs.Skipped) > 0 {
		_, _ = fmt.Fprintf(w, "Left out (blocked by class C drift, untouched): %s.\n", strings.Join(s.objs.Skipped, ", "))
	}

	_, _ = fmt.Fprintf(w, "The previous administrators' client certificates stay valid: rotate the CAs when you can (ichor cluster rotate-ca %s).\n"+
		"Once the controller runs, release the hold, one machine at a time, control planes first:\n  ichor adopt --release --cluster %s\n", c.Name, c.Name)
}

// helmManaged says whether the install step is skipped for inst: Helm
// manages that Ichor. Its version must be this CLI's (without build
// metadata), or the adoption stops before it writes a resource.
func helmManaged(inst *ichorv1alpha1.IchorInstallation, cliVersion string) (bool, error) {
	if inst.Spec.Deployment.Manager != ichorv1alpha1.ManagerHelm {
		return false, nil
	}

	want, _, _ := strings.Cut(cliVersion, "+")
	if have := inst.Status.InstalledVersion; have != want {
		return false, fmt.Errorf("the Ichor in the cluster is %s, installed with Helm, and this ichor is %s: the versions must be equal. "+
			"Upgrade the release with `helm upgrade` to %s (Helm manages that Ichor), or run the adoption with ichor %s; nothing was written to the cluster",
			orUnknown(have), want, want, orUnknown(have))
	}

	return true, nil
}

func orUnknown(v string) string {
	if v == "" {
		return "(version not recorded yet)"
	}

	return v
}
