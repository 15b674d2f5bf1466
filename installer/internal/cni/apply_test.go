package cni_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/tools/testenv"
)

// The tests run in this order on the shared world; each that needs a
// release makes sure there is one.

// TestApplyBadRequest: a request that does not render (a chart version this
// binary does not embed, an Ichor-owned key in the user's values) fails with
// the refusal's error before anything is written: no release record.
func TestApplyBadRequest(t *testing.T) {
	before := releaseSecrets(t)

	for _, tc := range []struct {
		name string
		req  cilium.Request
		want any
		text string
	}{
		{"unknown version", cilium.Request{Version: "v0.0.1"}, new(*cilium.UnknownVersionError), "the Cilium chart v0.0.1 is not embedded"},
		{"owned key", cilium.Request{UserValues: map[string]any{"ipam": map[string]any{"mode": "cluster-pool"}}}, new(*ciliumvalues.OwnedKeyError), `"ipam.mode"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer

			applied, err := cilium.Apply(t.Context(), admin, tc.req, applyTimeout, &log)
			if err == nil {
				t.Fatalf("Apply = %+v, want an error", applied)
			}

			if !errors.As(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Apply error = %v (%T), want a %T saying %q", err, err, tc.want, tc.text)
			}
		})
	}

	if after := releaseSecrets(t); !maps.Equal(before, after) {
		t.Fatalf("the release's Secrets changed: before %v, after %v", before, after)
	}

	if len(before) == 0 {
		state, err := cilium.Deployed(t.Context(), admin)
		testenv.Must(t, err)

		if state != nil {
			t.Fatalf("Deployed = %+v, want none", state)
		}
	}
}

// TestApplyAdoptsWithoutRollout: the first Apply over what Talos created
// from the inline manifest installs the release taking the objects over:
// they carry Helm's ownership label and annotations, and nothing rolls (the
// DaemonSet's and Deployment's generation and every Cilium pod stay). Apply
// again with the same request does nothing.
func TestApplyAdoptsWithoutRollout(t *testing.T) {
	ctx := t.Context()

	if state, err := cilium.Deployed(ctx, admin); err != nil || state != nil {
		t.Fatalf("the test needs a cluster without the release (it runs before the others): Deployed = %+v, %v", state, err)
	}

	rendered, err := cilium.Render(ctx, base.Options())
	testenv.Must(t, err)

	gens := generations(t)
	pods := ciliumPods(t)
	uids := objectUIDs(t, rendered.Manifest)
	depBefore, err := clientset.AppsV1().Deployments(cilium.Namespace).Get(ctx, "cilium-operator", metav1.GetOptions{})
	testenv.Must(t, err)

	applied := apply(t, base)

	want := cilium.Applied{Action: cilium.ActionAdopted, Revision: 1, Version: rendered.Version, ValuesSHA256: cilium.ValuesSHA256(rendered.Values)}
	if *applied != want {
		t.Fatalf("Apply = %+v, want %+v", *applied, want)
	}

	assertDeployed(t, 1, want.Version, want.ValuesSHA256)

	// The DaemonSet's generation moves with its spec only. A Deployment's
	// also moves when its annotations change (they are copied to its
	// ReplicaSets; kubernetes pkg/registry/apps/deployment/strategy.go,
	// PrepareForUpdate), which adoption does, so its spec is compared instead.
	depAfter, err := clientset.AppsV1().Deployments(cilium.Namespace).Get(ctx, "cilium-operator", metav1.GetOptions{})
	testenv.Must(t, err)

	if got := generations(t); got[0] != gens[0] || !apiequality.Semantic.DeepEqual(depBefore.Spec, depAfter.Spec) {
		t.Errorf("adoption changed a spec: DaemonSet generation %d, was %d; Deployment spec\n%+v\nwas\n%+v", got[0], gens[0], depAfter.Spec, depBefore.Spec)
	}

	if got := ciliumPods(t); !maps.Equal(got, pods) {
		t.Errorf("Cilium pods %v, were %v: adoption rolled them", got, pods)
	}

	if got := objectUIDs(t, rendered.Manifest); !maps.Equal(got, uids) {
		t.Errorf("object UIDs %v, were %v: adoption recreated objects", got, uids)
	}

	for key, obj := range objects(t, rendered.Manifest) {
		ann, lbl := obj.GetAnnotations(), obj.GetLabels()
		if ann["meta.helm.sh/release-name"] != cilium.ReleaseName || ann["meta.helm.sh/release-namespace"] != cilium.Namespace ||
			lbl["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%s is not Helm's: annotations %v, labels %v", key, ann, lbl)
		}
	}

	again := apply(t, base)
	if want.Action = cilium.ActionUnchanged; *again != want {
		t.Fatalf("second Apply = %+v, want %+v", *again, want)
	}

	if n := len(releaseSecrets(t)); n != 1 {
		t.Fatalf("%d release records after an unchanged Apply, want 1", n)
	}
}

// TestApplyUpgradesValuesAndWaits: changed values that change the agent's
// pod template are an upgrade, and Apply returns only once the DaemonSet has
// rolled out the new template on every node.
func TestApplyUpgradesValuesAndWaits(t *testing.T) {
	ctx := t.Context()
	prev := released(t)

	req := base
	req.UserValues = map[string]any{"podAnnotations": map[string]any{"ichor.test/upgrade": "values"}}

	ds0, err := clientset.AppsV1().DaemonSets(cilium.Namespace).Get(ctx, "cilium", metav1.GetOptions{})
	testenv.Must(t, err)

	applied := apply(t, req)

	// Read at once: Apply's return is the claim that the rollout is done.
	ds, err := clientset.AppsV1().DaemonSets(cilium.Namespace).Get(ctx, "cilium", metav1.GetOptions{})
	testenv.Must(t, err)

	if applied.Action != cilium.ActionUpgraded || applied.Revision != prev.Revision+1 {
		t.Fatalf("Apply = %+v, want upgraded to revision %d", *applied, prev.Revision+1)
	}

	if ds.Generation == ds0.Generation || ds.Spec.Template.Annotations["ichor.test/upgrade"] != "values" {
		t.Fatalf("DaemonSet cilium: generation %d (was %d), template annotations %v: the upgrade did not change the template",
			ds.Generation, ds0.Generation, ds.Spec.Template.Annotations)
	}

	if err := daemonSetDone(ds); err != nil {
		t.Fatalf("Apply returned before the rollout was done: %v", err)
	}

	rendered, err := cilium.Render(ctx, req.Options())
	testenv.Must(t, err)
	assertDeployed(t, applied.Revision, rendered.Version, cilium.ValuesSHA256(rendered.Values))
}

// TestApplyRecoversPendingRelease: a run killed mid-upgrade leaves the
// newest record pending-upgrade (Helm then refuses to upgrade); Apply marks
// it failed, says so, and upgrades over it. No Cilium object is deleted or
// recreated, and with the same values no pod rolls.
func TestApplyRecoversPendingRelease(t *testing.T) {
	ctx := t.Context()

	released(t)
	apply(t, base)

	rendered, err := cilium.Render(ctx, base.Options())
	testenv.Must(t, err)

	testenv.Eventually(t, waitTimeout, "Cilium rolled out", func() error { return rolledOut(ctx) })

	uids := objectUIDs(t, rendered.Manifest)
	pods := ciliumPods(t)

	// What a Job killed during `helm upgrade` leaves: Helm creates the new
	// record pending-upgrade before it patches anything (pkg/action/upgrade.go
	// performUpgrade) and never finishes it.
	store := storage.Init(driver.NewSecrets(clientset.CoreV1().Secrets(cilium.Namespace)))
	last, err := store.Last(cilium.ReleaseName)
	testenv.Must(t, err)

	pending := *last
	pending.Version = last.Version + 1
	pending.Info = &release.Info{
		FirstDeployed: last.Info.FirstDeployed, LastDeployed: last.Info.LastDeployed,
		Status: release.StatusPendingUpgrade, Description: "Preparing upgrade",
	}
	testenv.Must(t, store.Create(&pending))

	state, err := cilium.Deployed(ctx, admin)
	testenv.Must(t, err)

	if state == nil || state.Status != release.StatusPendingUpgrade.String() || state.Revision != pending.Version {
		t.Fatalf("Deployed = %+v, want revision %d pending-upgrade", state, pending.Version)
	}

	var log bytes.Buffer

	applied, err := cilium.Apply(ctx, admin, base, applyTimeout, &log)
	t.Logf("Apply log:\n%s", log.String())

	if err != nil {
		t.Fatalf("Apply over a pending record: %v", err)
	}

	if applied.Action != cilium.ActionUpgraded || applied.Revision != pending.Version+1 {
		t.Fatalf("Apply = %+v, want upgraded to revision %d", *applied, pending.Version+1)
	}

	if want := fmt.Sprintf("recovered: revision %d was left pending-upgrade", pending.Version); !strings.Contains(log.String(), want) {
		t.Errorf("the log does not say %q", want)
	}

	old, err := store.Get(cilium.ReleaseName, pending.Version)
	testenv.Must(t, err)

	if old.Info.Status != release.StatusFailed || !strings.Contains(old.Info.Description, "interrupted") {
		t.Errorf("revision %d is %s %q, want failed, saying it was interrupted", pending.Version, old.Info.Status, old.Info.Description)
	}

	assertDeployed(t, pending.Version+1, rendered.Version, cilium.ValuesSHA256(rendered.Values))

	if got := objectUIDs(t, rendered.Manifest); !maps.Equal(got, uids) {
		t.Errorf("object UIDs %v, were %v: the recovery deleted objects", got, uids)
	}

	if got := ciliumPods(t); !maps.Equal(got, pods) {
		t.Errorf("Cilium pods %v, were %v: the recovery rolled them", got, pods)
	}
}

// apply runs Apply as the cluster admin, logging its log.
func apply(t *testing.T, req cilium.Request) *cilium.Applied {
	t.Helper()

	var log bytes.Buffer

	applied, err := cilium.Apply(t.Context(), admin, req, applyTimeout, &log)
	t.Logf("Apply log:\n%s", log.String())

	if err != nil {
		t.Fatalf("Apply: %v", err)
	}

	return applied
}

// released makes sure the release is deployed and returns its state.
func released(t *testing.T) *cilium.ReleaseState {
	t.Helper()

	state, err := cilium.Deployed(t.Context(), admin)
	testenv.Must(t, err)

	if state == nil || state.Status != release.StatusDeployed.String() {
		apply(t, base)

		state, err = cilium.Deployed(t.Context(), admin)
		testenv.Must(t, err)
	}

	return state
}

func assertDeployed(t *testing.T, revision int, version, sum string) {
	t.Helper()

	state, err := cilium.Deployed(t.Context(), admin)
	testenv.Must(t, err)

	if state == nil || state.Status != release.StatusDeployed.String() || state.Revision != revision || state.Version != version || state.ValuesSHA256 != sum {
		t.Fatalf("Deployed = %+v, want deployed revision %d of %s with values %s", state, revision, version, sum)
	}
}

// releaseSecrets are the release's records in Helm's storage: Secret name → resourceVersion.
func releaseSecrets(t *testing.T) map[string]string {
	t.Helper()

	list, err := clientset.CoreV1().Secrets(cilium.Namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "owner=helm,name=" + cilium.ReleaseName})
	testenv.Must(t, err)

	out := map[string]string{}
	for _, s := range list.Items {
		out[s.Name] = s.ResourceVersion
	}

	return out
}

// generations are the DaemonSet cilium's and the Deployment cilium-operator's metadata.generation.
func generations(t *testing.T) [2]int64 {
	t.Helper()

	ds, err := clientset.AppsV1().DaemonSets(cilium.Namespace).Get(t.Context(), "cilium", metav1.GetOptions{})
	testenv.Must(t, err)

	dep, err := clientset.AppsV1().Deployments(cilium.Namespace).Get(t.Context(), "cilium-operator", metav1.GetOptions{})
	testenv.Must(t, err)

	return [2]int64{ds.Generation, dep.Generation}
}

// objects are the live objects of a manifest, by "Kind namespace/name".
func objects(t *testing.T, manifest string) map[string]*unstructured.Unstructured {
	t.Helper()

	dyn, err := dynamic.NewForConfig(admin)
	testenv.Must(t, err)

	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(clientset.Discovery()))
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	out := map[string]*unstructured.Unstructured{}

	for {
		obj := &unstructured.Unstructured{}

		err := dec.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			break
		}

		testenv.Must(t, err)

		if len(obj.Object) == 0 {
			continue
		}

		gvk := obj.GroupVersionKind()

		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		testenv.Must(t, err)

		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = cilium.Namespace
			}

			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}

		key := fmt.Sprintf("%s %s/%s", gvk.Kind, obj.GetNamespace(), obj.GetName())

		live, err := ri.Get(t.Context(), obj.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			t.Fatalf("%s is gone", key)
		}

		testenv.Must(t, err)

		out[key] = live
	}

	if len(out) == 0 {
		t.Fatal("the manifest has no objects")
	}

	return out
}

// objectUIDs are the UIDs of the live objects of a manifest.
func objectUIDs(t *testing.T, manifest string) map[string]string {
	t.Helper()

	out := map[string]string{}
	for k, o := range objects(t, manifest) {
		out[k] = string(o.GetUID())
	}

	return out
}
