package cilium

import (
	"bytes"
	"fmt"
	"io"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	helmtime "helm.sh/helm/v3/pkg/time"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/resource"
)

// rollback makes the release what its revision prev deployed after the
// upgrade recorded as failed failed, and records that as a new revision.
//
// It does what Helm's Rollback action does (helm.sh/helm/v3 pkg/action/
// rollback.go, performRollback: a three-way update from the failed
// revision's manifest to prev's, a wait, the previous deployments
// superseded), with one difference. An upgrade that fails part-way has not
// deleted the objects of prev its chart no longer renders: Helm deletes them
// only after every update succeeded (pkg/kube/client.go, update). Helm's
// rollback finds such an object live but not in the failed revision and
// takes the live object as the baseline of its patch, which then removes
// every field the API server set: on Cilium's hubble-generate-certs Job
// (named from a hash of its spec, so each chart version has its own) that is
// the selector and the pod labels, which a Job refuses to lose. Here the
// baseline of such an object is prev's own manifest of it: the failed
// upgrade never touched it, so the patch is empty and the object is left as
// it is.
func rollback(ac *action.Configuration, failed, prev *release.Release, timeout time.Duration, log io.Writer) (*release.Release, error) {
	current, err := ac.KubeClient.Build(bytes.NewBufferString(failed.Manifest), false)
	if err != nil {
		return nil, fmt.Errorf("read the objects of the failed revision %d: %w", failed.Version, err)
	}

	target, err := ac.KubeClient.Build(bytes.NewBufferString(prev.Manifest), false)
	if err != nil {
		return nil, fmt.Errorf("read the objects of revision %d: %w", prev.Version, err)
	}

	// The ownership Helm stamps on what it applies (pkg/action/validate.go,
	// setMetadataVisitor): an object the rollback creates again keeps it.
	if err := target.Visit(ownedBy(ReleaseName, Namespace)); err != nil {
		return nil, err
	}

	baseline := append(kube.ResourceList{}, current...)

	for _, info := range target {
		if current.Get(info) == nil {
			baseline = append(baseline, info)
			logf(log, "rollback: %s %s was not touched by the failed upgrade; it stays as revision %d left it",
				info.Mapping.GroupVersionKind.Kind, info.Name, prev.Version)
		}
	}

	last, err := ac.Releases.Last(ReleaseName)
	if err != nil {
		return nil, fmt.Errorf("read the Helm release %s/%s: %w", Namespace, ReleaseName, err)
	}

	rel := &release.Release{
		Name: ReleaseName, Namespace: Namespace, Chart: prev.Chart, Config: prev.Config, Manifest: prev.Manifest, Hooks: prev.Hooks,
		Version: last.Version + 1,
		Info: &release.Info{
			FirstDeployed: prev.Info.FirstDeployed, LastDeployed: helmtime.Now(),
			Status: release.StatusPendingRollback, Description: fmt.Sprintf("Rollback to %d", prev.Version),
		},
	}

	if err := ac.Releases.Create(rel); err != nil {
		return nil, fmt.Errorf("record the rollback of the Helm release %s/%s: %w", Namespace, ReleaseName, err)
	}

	if _, err := ac.KubeClient.Update(baseline, target, false); err != nil {
		return nil, recordFailed(ac, rel, fmt.Errorf("roll the objects back to revision %d: %w", prev.Version, err))
	}

	if err := ac.KubeClient.Wait(target, timeout); err != nil {
		return nil, recordFailed(ac, rel, fmt.Errorf("wait for revision %d's objects to roll out: %w", prev.Version, err))
	}

	deployed, err := ac.Releases.DeployedAll(ReleaseName)
	if err == nil {
		for _, d := range deployed {
			d.Info.Status = release.StatusSuperseded
			if err := ac.Releases.Update(d); err != nil {
				return nil, fmt.Errorf("mark revision %d superseded: %w", d.Version, err)
			}
		}
	}

	rel.Info.Status = release.StatusDeployed
	if err := ac.Releases.Update(rel); err != nil {
		return nil, fmt.Errorf("record revision %d deployed: %w", rel.Version, err)
	}

	return rel, nil
}

// recordFailed marks the rollback's record failed with err and returns err.
func recordFailed(ac *action.Configuration, rel *release.Release, err error) error {
	rel.SetStatus(release.StatusFailed, "Rollback failed: "+err.Error())
	if uerr := ac.Releases.Update(rel); uerr != nil {
		return fmt.Errorf("%w (and recording it failed: %w)", err, uerr)
	}

	return err
}

// ownedBy adds Helm's ownership label and annotations to an object.
func ownedBy(name, namespace string) resource.VisitorFunc {
	return func(info *resource.Info, err error) error {
		if err != nil {
			return err
		}

		acc, err := meta.Accessor(info.Object)
		if err != nil {
			return err
		}

		labels := acc.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}

		labels["app.kubernetes.io/managed-by"] = "Helm"
		acc.SetLabels(labels)

		ann := acc.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}

		ann["meta.helm.sh/release-name"], ann["meta.helm.sh/release-namespace"] = name, namespace
		acc.SetAnnotations(ann)

		return nil
	}
}
