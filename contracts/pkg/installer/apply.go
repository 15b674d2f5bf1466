package installer

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/install"
)

// apply server-side applies o as the installer (field manager
// ichor-installer, taking over fields another manager set: the manifest is
// the source of truth). An object marked create-only is created when missing
// and otherwise left alone.
func (in *Installer) apply(ctx context.Context, o *unstructured.Unstructured) error {
	if o.GetAnnotations()[install.CreateOnlyAnnotation] == "true" {
		err := in.c.Create(ctx, o.DeepCopy(), client.FieldOwner(install.FieldManager))
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}

		return fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
	}

	err := in.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner(install.FieldManager), client.ForceOwnership)
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
	}

	return nil
}

// applyInstallerRBAC is step 1: the Namespace and the installer's own
// ServiceAccount and roles, with the rights of the release being replaced.
func (in *Installer) applyInstallerRBAC(ctx context.Context) error {
	objs := install.ByStep(in.objs, install.StepInstallerRBAC)
	in.stepf("installer RBAC: applying %s", names(objs))

	for _, o := range objs {
		if err := in.apply(ctx, o); err != nil {
			return err
		}
	}

	return nil
}

// refuseHelm reads the IchorInstallation: a Helm-managed Ichor is Helm's to
// upgrade. It also learns the version installed before this run.
func (in *Installer) refuseHelm(ctx context.Context) error {
	ii, err := in.installation(ctx)
	if err != nil || ii == nil {
		return err
	}

	in.previous = ii.Status.InstalledVersion

	if ii.Spec.Deployment.Manager == ichorv1alpha1.ManagerHelm {
		return errors.New("this Ichor is Helm's (IchorInstallation spec.deployment.manager is helm): upgrade it with `helm upgrade`; " +
			"the installer changes nothing")
	}

	return nil
}

// installation reads the IchorInstallation; nil when there is none (or its
// CRD is not installed yet).
func (in *Installer) installation(ctx context.Context) (*ichorv1alpha1.IchorInstallation, error) {
	ii := &ichorv1alpha1.IchorInstallation{}

	err := in.c.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, ii)
	if apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err) {
		return nil, nil
	}

	if err != nil {
		return nil, fmt.Errorf("reading IchorInstallation %s: %w", ichorv1alpha1.IchorInstallationName, err)
	}

	return ii, nil
}

// applyCRDs is step 4: the CRDs, applied and Established, then the
// IchorInstallation created if there is none.
func (in *Installer) applyCRDs(ctx context.Context) error {
	crds := install.ByStep(in.objs, install.StepCRDs)
	in.stepf("CRDs: applying %d CustomResourceDefinitions, then waiting up to %s for them to be Established", len(crds), in.o.CRDTimeout)

	for _, o := range crds {
		if err := in.apply(ctx, o); err != nil {
			return err
		}
	}

	if err := in.waitEstablished(ctx, crds); err != nil {
		return err
	}

	in.logf("      the CRDs are Established")

	return in.ensureInstallation(ctx)
}

// ensureInstallation creates the IchorInstallation when there is none (its
// spec asks for this version, managed by ichor) and marks the run in its status.
func (in *Installer) ensureInstallation(ctx context.Context) error {
	ii, err := in.installationServed(ctx)
	if err != nil {
		return err
	}

	if ii == nil {
		ii = &ichorv1alpha1.IchorInstallation{
			ObjectMeta: metav1.ObjectMeta{Name: ichorv1alpha1.IchorInstallationName},
			Spec: ichorv1alpha1.IchorInstallationSpec{
				Version:    ichorv1alpha1.IchorVersionSpec{Version: in.o.Version},
				Deployment: ichorv1alpha1.IchorDeploymentSpec{Manager: ichorv1alpha1.ManagerIchor},
			},
		}

		if in.o.UIURL != "" {
			ii.Annotations = map[string]string{install.UIURLAnnotation: in.o.UIURL}
		}

		err := in.c.Create(ctx, ii, client.FieldOwner(install.FieldManager))
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating IchorInstallation %s: %w", ichorv1alpha1.IchorInstallationName, err)
		}

		in.logf("      created IchorInstallation %s (version %s, managed by ichor)", ii.Name, in.o.Version)

		if in.o.UIURL != "" {
			in.logf("      recorded ichor-ui's URL %s on it", in.o.UIURL)
		}
	} else if ii.Spec.Version.Version != in.o.Version {
		in.logf("      note: IchorInstallation %s asks for %s; this installer installs %s", ii.Name, ii.Spec.Version.Version, in.o.Version)
	}

	if err := in.recordedUIURL(ctx); err != nil {
		return err
	}

	return in.writeStatus(ctx, func(st *ichorv1alpha1.IchorInstallationStatus) {
		setInstalled(st, "Unknown", ichorv1alpha1.InstallInProgressReason, "the installer is installing Ichor "+in.o.Version)
	})
}

// recordedUIURL takes, without --ui-url, the URL an earlier run (or `ichor
// init --ui-url`) recorded on the IchorInstallation, so an upgrade keeps
// ichor-ui signing in Ichor's users where it did. A new --ui-url is recorded
// once the run succeeded (recordUIURL): the annotation is checked by the
// admission webhook, which the controller serves.
func (in *Installer) recordedUIURL(ctx context.Context) error {
	ii, err := in.installation(ctx)
	if err != nil || ii == nil {
		return err
	}

	recorded := ii.Annotations[install.UIURLAnnotation]
	if in.o.UIURL != "" || recorded == "" {
		return nil
	}

	if err := install.CheckUIURL(recorded); err != nil {
		return fmt.Errorf("IchorInstallation %s's annotation %s: %w; correct it with kubectl annotate --overwrite, or run the installer with --ui-url",
			ii.Name, install.UIURLAnnotation, err)
	}

	in.o.UIURL = recorded

	return nil
}

// recordUIURL records --ui-url on the IchorInstallation when it is not
// recorded there yet.
func (in *Installer) recordUIURL(ctx context.Context) error {
	ii, err := in.installation(ctx)
	if err != nil || ii == nil || in.o.UIURL == "" || ii.Annotations[install.UIURLAnnotation] == in.o.UIURL {
		return err
	}

	patch := client.MergeFrom(ii.DeepCopy())
	metav1.SetMetaDataAnnotation(&ii.ObjectMeta, install.UIURLAnnotation, in.o.UIURL)

	if err := in.c.Patch(ctx, ii, patch, client.FieldOwner(install.FieldManager)); err != nil {
		return fmt.Errorf("recording --ui-url on IchorInstallation %s: %w", ii.Name, err)
	}

	in.logf("      recorded ichor-ui's URL %s on IchorInstallation %s", in.o.UIURL, ii.Name)

	return nil
}

// installationServed reads the IchorInstallation right after its CRD was
// established, waiting out the moment the API server's discovery does not
// serve the kind yet.
func (in *Installer) installationServed(ctx context.Context) (*ichorv1alpha1.IchorInstallation, error) {
	var ii *ichorv1alpha1.IchorInstallation

	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, in.o.CRDTimeout, true, func(ctx context.Context) (bool, error) {
		got := &ichorv1alpha1.IchorInstallation{}

		err := in.c.Get(ctx, client.ObjectKey{Name: ichorv1alpha1.IchorInstallationName}, got)

		switch {
		case err == nil:
			ii = got

			return true, nil
		case apierrors.IsNotFound(err) && !apimeta.IsNoMatchError(err):
			return true, nil
		case apimeta.IsNoMatchError(err):
			return false, nil
		default:
			return false, err
		}
	})
	if err != nil {
		return nil, fmt.Errorf("reading IchorInstallation %s: %w", ichorv1alpha1.IchorInstallationName, err)
	}

	return ii, nil
}

// applyWorkload is steps 5 and 6: the objects of one Deployment's step,
// with its replicas decided from the nodes (one schedulable node: one
// replica and no PodDisruptionBudget), then the wait until it is available.
func (in *Installer) applyWorkload(ctx context.Context, step install.Step, deployment string) error {
	objs := install.ByStep(in.objs, step)

	var dep *unstructured.Unstructured

	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == deployment {
			dep = o
		}
	}

	if dep == nil {
		return fmt.Errorf("the manifest has no Deployment %s", deployment)
	}

	if deployment == install.UIName && in.o.UIURL != "" {
		if err := install.WithIchorUsers(dep, in.o.UIURL); err != nil {
			return err
		}

		in.logf("      ichor-ui signs in Ichor's own users as the issuer at %s", in.o.UIURL)
	}

	a, err := in.availability(ctx, dep)
	if err != nil {
		return err
	}

	if err := unstructured.SetNestedField(dep.Object, int64(a.Replicas), "spec", "replicas"); err != nil {
		return err
	}

	var apply, drop []*unstructured.Unstructured

	for _, o := range objs {
		if o.GetKind() == "PodDisruptionBudget" && o.GetName() == deployment && !a.PDB {
			drop = append(drop, o)

			continue
		}

		apply = append(apply, o)
	}

	in.stepf("%s: %s; applying %d objects, then waiting up to %s for Deployment %s to be available",
		step, a, len(apply), in.o.WaitTimeout, deployment)

	for _, o := range apply {
		if err := in.apply(ctx, o); err != nil {
			return err
		}
	}

	for _, o := range drop {
		if err := in.delete(ctx, o); err != nil {
			return err
		}
	}

	// ichor-ui is Ready only once it serves the namespace's TalosCluster,
	// which `ichor init` writes after this Job: on a fresh install its pods
	// running the new template are what can be waited for.
	if step == install.StepUI {
		none, err := in.noTalosCluster(ctx)
		if err != nil {
			return err
		}

		if none {
			in.logf("      no TalosCluster in %s yet: ichor-ui is not Ready before there is one, so its pods running will do", in.o.Namespace)

			available, err := in.waitDeploymentStarted(ctx, deployment, in.o.WaitTimeout)
			if err != nil {
				return err
			}

			if available {
				in.logf("      Deployment %s is available (%d/%d)", deployment, a.Replicas, a.Replicas)
			} else {
				in.logf("      Deployment %s is rolled out and its containers run (%d/%d); it is Ready once `ichor init` writes the TalosCluster", deployment, a.Replicas, a.Replicas)
			}

			return nil
		}
	}

	if err := in.waitDeployment(ctx, deployment, in.o.WaitTimeout); err != nil {
		return err
	}

	in.logf("      Deployment %s is available (%d/%d)", deployment, a.Replicas, a.Replicas)

	return nil
}

// noTalosCluster says whether the namespace has no TalosCluster yet.
func (in *Installer) noTalosCluster(ctx context.Context) (bool, error) {
	l := &ichorv1alpha1.TalosClusterList{}
	if err := in.c.List(ctx, l, client.InNamespace(in.o.Namespace), client.Limit(1)); err != nil {
		return false, fmt.Errorf("listing the TalosClusters of %s: %w", in.o.Namespace, err)
	}

	return len(l.Items) == 0, nil
}

// availability decides one replica or two for a Deployment of the manifest
// from the nodes its pods can run on.
func (in *Installer) availability(ctx context.Context, dep *unstructured.Unstructured) (install.Availability, error) {
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(dep.Object, d); err != nil {
		return install.Availability{}, fmt.Errorf("the manifest's Deployment %s: %w", dep.GetName(), err)
	}

	nodes := &corev1.NodeList{}
	if err := in.c.List(ctx, nodes); err != nil {
		return install.Availability{}, fmt.Errorf("listing the nodes: %w", err)
	}

	pod := &d.Spec.Template.Spec

	return install.Decide(install.SchedulableNodes(nodes.Items, pod), install.MustStaySingle(pod)), nil
}

// delete deletes o if it exists.
func (in *Installer) delete(ctx context.Context, o *unstructured.Unstructured) error {
	err := in.c.Delete(ctx, o.DeepCopy())
	if apierrors.IsNotFound(err) {
		return nil
	}

	if err != nil {
		return fmt.Errorf("deleting %s %s: %w", o.GetKind(), o.GetName(), err)
	}

	in.logf("      deleted %s %s", o.GetKind(), o.GetName())

	return nil
}
