package installer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// Snapshot annotations and keys.
const (
	// snapshotStateAnnotation is taken while a run may still need the
	// snapshot to roll back, released once the run ended (installed or
	// rolled back). A run that finds a taken snapshot keeps it: the run that
	// took it did not finish, and what runs now may be half of its install.
	snapshotStateAnnotation = "ichor.maesh.dev/snapshot-state"
	// snapshotByAnnotation is the version whose run took the snapshot.
	snapshotByAnnotation = "ichor.maesh.dev/snapshot-taken-by"
	stateTaken           = "taken"
	stateReleased        = "released"
	// versionKey is the installed version the snapshot is of.
	versionKey = "version"
	// objectsKey holds the objects, multi-document YAML.
	objectsKey = "objects.yaml"
	// maxSnapshotBytes stays under the API server's 1 MiB object limit.
	maxSnapshotBytes = 900 * 1024
)

// snapshot is what ran before this run changed anything: the restorable
// objects that existed, as they were.
type snapshot struct {
	version string
	objects []*unstructured.Unstructured
	// reused says the snapshot was an earlier, unfinished run's.
	reused bool
}

// has reports whether the snapshot holds the object o names.
func (s *snapshot) has(o *unstructured.Unstructured) bool {
	for _, so := range s.objects {
		if key(so) == key(o) {
			return true
		}
	}

	return false
}

func key(o *unstructured.Unstructured) string {
	return o.GroupVersionKind().GroupKind().String() + "/" + o.GetNamespace() + "/" + o.GetName()
}

// restorable are the objects a rollback puts back: those of the manifest's
// controller and ichor-ui steps that the installer owns (not the
// create-only ones, which are the controller's to keep), and the network
// policies when this run applies them. The installer's RBAC, the Namespace
// and the CRDs are never rolled back: CRDs are never downgraded.
func (in *Installer) restorable() []*unstructured.Unstructured {
	out := append([]*unstructured.Unstructured(nil), in.policies...)

	for _, o := range in.objs {
		s := install.StepOf(o)
		if (s == install.StepController || s == install.StepUI) && o.GetAnnotations()[install.CreateOnlyAnnotation] != "true" {
			out = append(out, o)
		}
	}

	return out
}

// takeSnapshot is step 3: read what the manifest will change and store it in
// the ConfigMap ichor-installer-snapshot (Secret kinds in the Secret of that
// name), unless an unfinished earlier run's snapshot is there.
func (in *Installer) takeSnapshot(ctx context.Context) error {
	cm := &corev1.ConfigMap{}

	err := in.c.Get(ctx, client.ObjectKey{Namespace: in.o.Namespace, Name: SnapshotName}, cm)

	switch {
	case err == nil && cm.Annotations[snapshotStateAnnotation] == stateTaken:
		s, perr := in.readSnapshot(ctx, cm)
		if perr != nil {
			in.stepf("snapshot")

			return fmt.Errorf("an unfinished earlier run left ConfigMap %s/%s, which does not parse (%w); "+
				"delete it if the installed Ichor runs as it should, then run the installer again", in.o.Namespace, SnapshotName, perr)
		}

		in.snap = s
		if in.previous == "" {
			in.previous = s.version
		}

		in.stepf("snapshot: an earlier run (of %s) did not finish; keeping its snapshot of %s (%d objects) in ConfigMap %s/%s",
			cm.Annotations[snapshotByAnnotation], versionOrNone(s.version), len(s.objects), in.o.Namespace, SnapshotName)

		return nil
	case err != nil && !apierrors.IsNotFound(err):
		in.stepf("snapshot")

		return fmt.Errorf("reading ConfigMap %s/%s: %w", in.o.Namespace, SnapshotName, err)
	}

	s := &snapshot{version: in.previous}

	for _, o := range in.restorable() {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(o.GroupVersionKind())

		err := in.c.Get(ctx, client.ObjectKeyFromObject(o), cur)
		if apierrors.IsNotFound(err) {
			continue
		}

		if err != nil {
			in.stepf("snapshot")

			return fmt.Errorf("reading %s %s: %w", o.GetKind(), o.GetName(), err)
		}

		clean(cur)
		s.objects = append(s.objects, cur)
	}

	in.snap = s

	if err := in.writeSnapshot(ctx, s, stateTaken); err != nil {
		in.stepf("snapshot")

		return err
	}

	in.stepf("snapshot: %d objects of %s saved in ConfigMap %s/%s", len(s.objects), versionOrNone(s.version), in.o.Namespace, SnapshotName)

	return nil
}

// releaseSnapshot marks the snapshot as no longer needed by this run.
func (in *Installer) releaseSnapshot(ctx context.Context) error {
	cm := &corev1.ConfigMap{}
	if err := in.c.Get(ctx, client.ObjectKey{Namespace: in.o.Namespace, Name: SnapshotName}, cm); err != nil {
		return client.IgnoreNotFound(err)
	}

	before := cm.DeepCopy()

	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}

	cm.Annotations[snapshotStateAnnotation] = stateReleased

	return in.c.Patch(ctx, cm, client.MergeFrom(before))
}

// writeSnapshot stores s: Secret kinds in the Secret, the rest in the ConfigMap.
func (in *Installer) writeSnapshot(ctx context.Context, s *snapshot, state string) error {
	var plain, secret []*unstructured.Unstructured

	for _, o := range s.objects {
		if o.GetKind() == "Secret" && o.GroupVersionKind().Group == "" {
			secret = append(secret, o)
		} else {
			plain = append(plain, o)
		}
	}

	data, err := encode(plain)
	if err != nil {
		return err
	}

	if len(data) > maxSnapshotBytes {
		return fmt.Errorf("the snapshot is %d bytes, more than a ConfigMap holds", len(data))
	}

	meta := metav1.ObjectMeta{
		Namespace: in.o.Namespace, Name: SnapshotName,
		Labels:      map[string]string{"app.kubernetes.io/part-of": "ichor", "app.kubernetes.io/name": install.InstallerName},
		Annotations: map[string]string{snapshotStateAnnotation: state, snapshotByAnnotation: in.o.Version},
	}

	cm := &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{versionKey: s.version, objectsKey: string(data)}}
	if err := in.upsert(ctx, cm, &corev1.ConfigMap{}); err != nil {
		return fmt.Errorf("writing ConfigMap %s/%s: %w", in.o.Namespace, SnapshotName, err)
	}

	if len(secret) == 0 {
		return nil
	}

	sdata, err := encode(secret)
	if err != nil {
		return err
	}

	sec := &corev1.Secret{ObjectMeta: *meta.DeepCopy(), Data: map[string][]byte{objectsKey: sdata}}
	if err := in.upsert(ctx, sec, &corev1.Secret{}); err != nil {
		// The error names the Secret, never its data.
		return fmt.Errorf("writing Secret %s/%s: %s", in.o.Namespace, SnapshotName, apierrors.ReasonForError(err))
	}

	return nil
}

// upsert creates obj or replaces the existing one's labels, annotations and data.
func (in *Installer) upsert(ctx context.Context, obj, existing client.Object) error {
	err := in.c.Create(ctx, obj, client.FieldOwner(install.FieldManager))
	if !apierrors.IsAlreadyExists(err) {
		return err
	}

	if err := in.c.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
		return err
	}

	obj.SetResourceVersion(existing.GetResourceVersion())

	return in.c.Update(ctx, obj, client.FieldOwner(install.FieldManager))
}

// readSnapshot parses a stored snapshot.
func (in *Installer) readSnapshot(ctx context.Context, cm *corev1.ConfigMap) (*snapshot, error) {
	objs, err := install.Parse([]byte(cm.Data[objectsKey]))
	if err != nil {
		return nil, err
	}

	s := &snapshot{version: cm.Data[versionKey], objects: objs, reused: true}

	sec := &corev1.Secret{}

	err = in.c.Get(ctx, client.ObjectKeyFromObject(cm), sec)
	if apierrors.IsNotFound(err) {
		return s, nil
	}

	if err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %s", cm.Namespace, cm.Name, apierrors.ReasonForError(err))
	}

	secrets, err := install.Parse(sec.Data[objectsKey])
	if err != nil {
		return nil, errors.New("the snapshot Secret does not parse")
	}

	s.objects = append(s.objects, secrets...)

	return s, nil
}

func encode(objs []*unstructured.Unstructured) ([]byte, error) {
	var b bytes.Buffer

	for i, o := range objs {
		if i > 0 {
			b.WriteString("---\n")
		}

		y, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("encoding %s %s: %w", o.GetKind(), o.GetName(), err)
		}

		b.Write(y)
	}

	return b.Bytes(), nil
}

// clean strips what the API server, controllers and other managers keep on
// an object, so that applying it again restores the installed content:
// status, server-set metadata, the Deployment revision, a Service's
// allocated addresses, and the webhooks' CA bundle, which the controller
// keeps (the installer must never own it).
func clean(o *unstructured.Unstructured) {
	unstructured.RemoveNestedField(o.Object, "status")

	for _, f := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
		"deletionTimestamp", "deletionGracePeriodSeconds"} {
		unstructured.RemoveNestedField(o.Object, "metadata", f)
	}

	if a := o.GetAnnotations(); a != nil {
		delete(a, "kubectl.kubernetes.io/last-applied-configuration")
		delete(a, "deployment.kubernetes.io/revision")

		if len(a) == 0 {
			a = nil
		}

		o.SetAnnotations(a)
	}

	switch o.GetKind() {
	case "Service":
		unstructured.RemoveNestedField(o.Object, "spec", "clusterIP")
		unstructured.RemoveNestedField(o.Object, "spec", "clusterIPs")
	case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for i, h := range hooks {
			if m, ok := h.(map[string]any); ok {
				unstructured.RemoveNestedField(m, "clientConfig", "caBundle")
				hooks[i] = m
			}
		}

		if hooks != nil {
			_ = unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
		}
	}
}

// rollback applies the snapshot again, deletes what this run created, and
// waits for the snapshot's Deployments.
func (in *Installer) rollback(ctx context.Context) error {
	if in.snap == nil {
		return errors.New("no snapshot was taken")
	}

	var created []*unstructured.Unstructured

	for _, o := range in.restorable() {
		if !in.snap.has(o) {
			created = append(created, o)
		}
	}

	in.logf("rolling back to %s: applying the %d objects of the snapshot again, deleting %d object(s) the snapshot does not have",
		versionOrNone(in.snap.version), len(in.snap.objects), len(created))

	var errs []error

	for _, o := range in.snap.objects {
		if err := in.apply(ctx, o); err != nil {
			errs = append(errs, err)
		}
	}

	// Dependants first: the manifest's order puts roles before their
	// bindings and Services after Deployments; reverse it.
	for i := len(created) - 1; i >= 0; i-- {
		if err := in.delete(ctx, created[i]); err != nil {
			errs = append(errs, err)
		}
	}

	if err := errors.Join(errs...); err != nil {
		return err
	}

	var deployments []string

	for _, o := range in.snap.objects {
		if o.GetKind() == "Deployment" {
			deployments = append(deployments, o.GetName())
		}
	}

	for _, d := range deployments {
		in.logf("rollback: waiting up to %s for Deployment %s to be available again", in.o.WaitTimeout, d)

		if err := in.waitDeployment(ctx, d, in.o.WaitTimeout); err != nil {
			return err
		}
	}

	if len(deployments) > 0 {
		in.logf("rolled back: %s runs again (%s available)", versionOrNone(in.snap.version), strings.Join(deployments, ", "))
	} else {
		in.logf("rolled back: nothing of Ichor ran before this run, and nothing of it runs now")
	}

	if err := in.writeSnapshot(ctx, in.snap, stateReleased); err != nil {
		in.logf("warning: marking the snapshot done: %v", err)
	}

	return nil
}
