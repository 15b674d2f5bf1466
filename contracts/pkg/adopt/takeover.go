package adopt

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	helmrelease "helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium"
	"github.com/maeshinshin/ichor/contracts/pkg/cilium/ciliumvalues"
	"github.com/maeshinshin/ichor/contracts/pkg/cni"
	"github.com/maeshinshin/ichor/contracts/pkg/guard"
	"github.com/maeshinshin/ichor/contracts/pkg/release"
)

// The keys of cilium-config the takeover reads (the chart's
// cilium-configmap.yaml).
const (
	configIPAM           = "ipam"
	configRoutingMode    = "routing-mode"
	configTunnelProtocol = "tunnel-protocol"
	routingTunnel        = "tunnel"
)

// cniField is the field the takeover's refusals name.
const cniField = "cni"

// neverAccepted are the cilium-config keys whose change on a running data
// plane no flag accepts (architecture, "Cilium", "Takeover").
var neverAccepted = []string{configIPAM, configRoutingMode, configTunnelProtocol}

// TakeoverInput is what the Cilium takeover check needs from the plan and
// the person.
type TakeoverInput struct {
	// KubernetesVersion is the cluster's; KubeProxy the plan's mode (enabled
	// or replaced), from Talos's kube-proxy setting.
	KubernetesVersion string
	KubeProxy         string
	// InlineManifest names the foreign inline manifest entry that installed
	// Cilium ("" for a Cilium applied otherwise), and Foreign lists its
	// objects ("Kind namespace/name").
	InlineManifest string
	Foreign        []string
	// KubePrism is each machine's KubePrism by address.
	KubePrism map[string]KubePrism
	// AcceptDiff and AcceptChanges are --accept-cilium-diff and
	// --accept-cilium-changes.
	AcceptDiff, AcceptChanges bool
}

// CiliumLive is what runs: read from the cluster's Kubernetes API.
type CiliumLive struct {
	// DaemonSet is kube-system/cilium; nil when it does not exist.
	DaemonSet *appsv1.DaemonSet
	// Config is cilium-config's data (nil when it does not exist).
	Config map[string]string
	// Nodes is how many Nodes the cluster has; NoPodCIDR names those
	// without a pod CIDR (spec.podCIDR).
	Nodes     int
	NoPodCIDR []string
	// OtherCNIs are CNIs other than Cilium that run as DaemonSets
	// ("calico (kube-system/calico-node)"), whatever installed them.
	OtherCNIs []string
	// HelmRecords are Helm's release records of a release named cilium in
	// kube-system (the Secrets driver's Secrets), by name.
	HelmRecords []corev1.Secret
}

// helmRecordNames are the records' names.
func (l *CiliumLive) helmRecordNames() []string {
	out := make([]string, 0, len(l.HelmRecords))
	for _, s := range l.HelmRecords {
		out = append(out, s.Name)
	}

	return out
}

// ObjectDiff is how one object of the takeover's render differs from the
// live one; the values are never shown (a Secret's may be secret).
type ObjectDiff struct {
	// Object is "Kind namespace/name".
	Object string `json:"object"`
	// Missing is true when the object does not exist: the takeover creates it.
	Missing bool `json:"missing,omitempty"`
	// Paths are the fields whose live value the takeover changes.
	Paths []string `json:"paths,omitempty"`
	// Owned are those of Paths that Ichor-owned values decide.
	Owned []string `json:"owned,omitempty"`
}

// Takeover is the verdict of the Cilium takeover check.
type Takeover struct {
	// Running is the agent's version; Chart the embedded chart the takeover
	// installs (the same version when Ichor embeds it).
	Running string `json:"running"`
	Chart   string `json:"chart,omitempty"`
	// IPAM and Tunnel are read from cilium-config; the tunnel is carried
	// over into spec.cni.tunnel.
	IPAM   string `json:"ipam,omitempty"`
	Tunnel string `json:"tunnel,omitempty"`
	// Ready and Nodes: the agent is ready on Ready of the Nodes.
	Ready int `json:"ready"`
	Nodes int `json:"nodes"`
	// InlineManifest is the foreign entry the first render removes.
	InlineManifest string `json:"inlineManifest,omitempty"`
	// PriorRelease are the foreign Helm release's records, which the write
	// copies into the Secret PriorReleaseSecret, reads back and only then
	// deletes; UserValues are the values of its newest record without the
	// Ichor-owned keys (DroppedOwned), which become spec.cni.cilium.values.
	PriorRelease []string       `json:"priorRelease,omitempty"`
	UserValues   map[string]any `json:"userValues,omitempty"`
	DroppedOwned []string       `json:"droppedOwned,omitempty"`
	// Differences are the objects the takeover changes or creates.
	Differences []ObjectDiff `json:"differences,omitempty"`
	// LeftOver are objects of the foreign manifest the chart does not
	// render: Helm does not take them, and they stay as they are.
	LeftOver []string `json:"leftOver,omitempty"`
	// Refusals stop the adoption.
	Refusals []guard.Refusal `json:"refusals,omitempty"`
}

// Changes counts the changed fields, and those Ichor-owned values decide.
func (t *Takeover) Changes() (paths, owned, missing int) {
	for _, d := range t.Differences {
		paths += len(d.Paths)
		owned += len(d.Owned)

		if d.Missing {
			missing++
		}
	}

	return paths, owned, missing
}

// ReadCiliumLive reads the running Cilium: its DaemonSet, cilium-config,
// the Node count and Helm's records of a release named cilium.
func ReadCiliumLive(ctx context.Context, r client.Reader) (*CiliumLive, error) {
	live := &CiliumLive{}

	ds := &appsv1.DaemonSet{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: "cilium"}, ds); {
	case err == nil:
		live.DaemonSet = ds
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading DaemonSet %s/cilium: %w", cilium.Namespace, err)
	}

	var dss appsv1.DaemonSetList
	if err := r.List(ctx, &dss); err != nil {
		return nil, fmt.Errorf("listing the DaemonSets: %w", err)
	}

	for i := range dss.Items {
		// Cilium's own other DaemonSets (cilium-envoy, cilium-node-init) are Cilium.
		if strings.HasPrefix(dss.Items[i].Name, "cilium") {
			continue
		}

		d := cni.Detect(dss.Items[i : i+1])
		if d.Detected != cni.DetectedCilium && d.Detected != cni.DetectedNone && d.Detected != "" {
			live.OtherCNIs = append(live.OtherCNIs, fmt.Sprintf("%s (%s)", d.Detected, d.Via))
		}
	}

	slices.Sort(live.OtherCNIs)

	cm := &corev1.ConfigMap{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: cilium.Namespace, Name: cni.CiliumConfigMap}, cm); {
	case err == nil:
		live.Config = cm.Data
		if live.Config == nil {
			live.Config = map[string]string{}
		}
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", cilium.Namespace, cni.CiliumConfigMap, err)
	}

	var nodes corev1.NodeList
	if err := r.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing the Nodes: %w", err)
	}

	live.Nodes = len(nodes.Items)

	for _, n := range nodes.Items {
		if n.Spec.PodCIDR == "" {
			live.NoPodCIDR = append(live.NoPodCIDR, n.Name)
		}
	}

	slices.Sort(live.NoPodCIDR)

	// Helm's Secrets driver labels each record owner=helm, name=<release>
	// (helm.sh/helm/v3 pkg/storage/driver/secrets.go).
	var recs corev1.SecretList
	if err := r.List(ctx, &recs, client.InNamespace(cilium.Namespace), client.MatchingLabels{"owner": "helm", "name": cilium.ReleaseName}); err != nil {
		return nil, fmt.Errorf("listing Helm's release records in %s: %w", cilium.Namespace, err)
	}

	live.HelmRecords = recs.Items
	slices.SortFunc(live.HelmRecords, func(a, b corev1.Secret) int { return strings.Compare(a.Name, b.Name) })

	return live, nil
}

// CheckCiliumTakeover is the check before anything is written (architecture,
// "Cilium", "Takeover"): the live minor is the pinned chart's or the one
// below, ipam.mode is kubernetes, the tunnel protocol is carried over,
// Cilium runs on every Node and KubePrism is on port 7445 and healthy on
// every machine;
// then the chart is rendered with Ichor's values (and the user's layer of a
// Helm release) and every object is compared with the live one. A difference needs AcceptDiff; a change Ichor-owned values decide
// needs AcceptChanges; a change of IPAM or the tunnel is never accepted.
// A Cilium installed with Helm (or the Cilium CLI, which records a Helm
// release) as release cilium in kube-system keeps the values of its newest
// record, which must be deployed, without the Ichor-owned keys; a release
// of another name is refused. get reads the live object of a rendered one
// (nil, nil when it does not exist).
func CheckCiliumTakeover(ctx context.Context, live *CiliumLive, in TakeoverInput,
	get func(context.Context, *unstructured.Unstructured) (*unstructured.Unstructured, error),
) (*Takeover, error) {
	t := &Takeover{InlineManifest: in.InlineManifest, Nodes: live.Nodes}

	refuse := func(rule, wayOut string) {
		t.Refusals = append(t.Refusals, guard.Refusal{Field: cniField, Rule: rule, WayOut: wayOut})
	}

	again := "then run `ichor adopt --plan` again"

	if live.DaemonSet == nil || live.Config == nil {
		refuse(fmt.Sprintf("the cluster's configuration installs Cilium, but DaemonSet %s/cilium or ConfigMap %s/%s is not in the cluster",
			cilium.Namespace, cilium.Namespace, cni.CiliumConfigMap),
			"wait until Talos has applied the inline manifest (talosctl get manifests), "+again)

		return t, nil
	}

	if rel := live.DaemonSet.Annotations["meta.helm.sh/release-name"]; rel != "" && (rel != cilium.ReleaseName || live.DaemonSet.Annotations["meta.helm.sh/release-namespace"] != cilium.Namespace) {
		refuse(fmt.Sprintf("Cilium runs as Helm release %s/%s: Ichor takes over a release named %s in %s (the name Cilium's guides and the Cilium CLI use)",
			live.DaemonSet.Annotations["meta.helm.sh/release-namespace"], rel, cilium.ReleaseName, cilium.Namespace),
			"adopt the cluster with its Cilium left as it runs (--cni-unmanaged)")

		return t, nil
	}

	if len(live.HelmRecords) > 0 {
		if err := t.priorRelease(live); err != nil {
			refuse(err.Error(), "run `helm -n kube-system history cilium` and bring the release to a deployed revision, "+again)

			return t, nil
		}
	}

	t.Running = cni.Detect([]appsv1.DaemonSet{*live.DaemonSet}).CiliumVersion

	chart, err := cilium.TakeoverChart(t.Running)
	if err != nil {
		refuse(err.Error(), again)
	}

	t.Chart = chart

	t.IPAM = live.Config[configIPAM]
	if t.IPAM != CiliumIPAMKubernetes {
		refuse(fmt.Sprintf("cilium-config says ipam %q: Ichor takes over only a Cilium with ipam.mode %q and never changes the IPAM of a running data plane",
			t.IPAM, CiliumIPAMKubernetes), "move the cluster to Cilium's kubernetes IPAM mode first, "+again)
	}

	routing, tunnel := live.Config[configRoutingMode], live.Config[configTunnelProtocol]
	if routing == "" {
		routing = routingTunnel
	}

	if tunnel == "" {
		tunnel = ciliumvalues.TunnelVXLAN
	}

	switch {
	case routing != routingTunnel:
		refuse(fmt.Sprintf("Cilium routes in %q mode: Ichor runs Cilium in tunnel mode (vxlan or geneve) and never changes the routing of a running data plane", routing),
			"move Cilium to tunnel routing first, "+again)
	case tunnel != ciliumvalues.TunnelVXLAN && tunnel != ciliumvalues.TunnelGeneve:
		refuse(fmt.Sprintf("Cilium's tunnel protocol is %q: Ichor offers %s and %s", tunnel, ciliumvalues.TunnelVXLAN, ciliumvalues.TunnelGeneve),
			"move Cilium to one of them first, "+again)
	default:
		t.Tunnel = tunnel
	}

	ds := live.DaemonSet.Status
	t.Ready = int(ds.NumberReady)

	if int(ds.DesiredNumberScheduled) != live.Nodes || ds.NumberReady != ds.DesiredNumberScheduled || ds.UpdatedNumberScheduled != ds.DesiredNumberScheduled {
		refuse(fmt.Sprintf("Cilium is not healthy on every Node: the agent is scheduled on %d, ready on %d and up to date on %d of %d Nodes",
			ds.DesiredNumberScheduled, ds.NumberReady, ds.UpdatedNumberScheduled, live.Nodes),
			"wait until `kubectl -n kube-system rollout status ds/cilium` succeeds, "+again)
	}

	t.Refusals = append(t.Refusals, checkKubePrism(in.KubePrism, againAdopt)...)
	t.Refusals = append(t.Refusals, checkOtherCNIs(live, otherCNIAdopt)...)

	if len(t.Refusals) > 0 {
		return t, nil
	}

	if err := t.diff(ctx, in, get); err != nil {
		return nil, err
	}

	t.checkDiff(in)

	return t, nil
}

// KubePrism is one machine's KubePrism: its configured port (zero: off) and
// its health as the node reports it (KubePrismStatuses).
type KubePrism struct {
	Port    int
	Healthy bool
}

// The ways out that name the command to run again: the adoption's plan, or
// `ichor cni bootstrap`'s (CiliumInstallFor).
const (
	againAdopt    = "`ichor adopt --plan`"
	otherCNIAdopt = "this release adopts a cluster with a CNI other than Cilium only when the machine configuration installs it (--cni-unmanaged); " +
		"remove that CNI's DaemonSet first if it is a leftover, then run `ichor adopt --plan` again"
)

// checkOtherCNIs refuses a cluster that runs a CNI other than Cilium: Ichor
// never runs Cilium beside another CNI.
func checkOtherCNIs(live *CiliumLive, wayOut string) []guard.Refusal {
	if len(live.OtherCNIs) == 0 {
		return nil
	}

	return []guard.Refusal{{
		Field: cniField,
		Rule: fmt.Sprintf("the cluster runs %s, installed outside the machine configuration: Ichor manages only Cilium, never runs it beside another CNI and never migrates one",
			strings.Join(live.OtherCNIs, " and ")),
		WayOut: wayOut,
	}}
}

// checkKubePrism refuses a machine whose KubePrism is not on port 7445, or
// not healthy: Ichor's Cilium reaches the API server through it.
// again is the command to run again once it is fixed.
func checkKubePrism(prisms map[string]KubePrism, again string) []guard.Refusal {
	var noPrism, unhealthy []string

	for addr, kp := range prisms {
		switch {
		case kp.Port != ciliumvalues.KubePrismPort:
			noPrism = append(noPrism, fmt.Sprintf("%s (%s)", addr, portText(kp.Port)))
		case !kp.Healthy:
			unhealthy = append(unhealthy, addr)
		}
	}

	slices.Sort(noPrism)
	slices.Sort(unhealthy)

	var out []guard.Refusal

	if len(noPrism) > 0 {
		out = append(out, guard.Refusal{
			Field: cniField,
			Rule:  fmt.Sprintf("KubePrism is not on port %d on %s: Ichor's Cilium reaches the API server through it", ciliumvalues.KubePrismPort, strings.Join(noPrism, ", ")),
			WayOut: fmt.Sprintf("turn KubePrism on at port %d (machine.features.kubePrism) with talosctl patch machineconfig, then run %s again",
				ciliumvalues.KubePrismPort, again),
		})
	}

	if len(unhealthy) > 0 {
		out = append(out, guard.Refusal{
			Field:  cniField,
			Rule:   fmt.Sprintf("KubePrism is not healthy on %s (talosctl get kubeprismstatuses): Ichor's Cilium reaches the API server through it", strings.Join(unhealthy, ", ")),
			WayOut: "make the API server reachable from those machines, then run " + again + " again",
		})
	}

	return out
}

// CiliumInstall is the plan of installing Ichor's pinned Cilium into a
// cluster that runs no CNI (architecture, "ichor adopt", phase 3): in
// process, as Ichor's own Helm release, before Ichor and the resources.
type CiliumInstall struct {
	// Chart is the pinned chart; Nodes the Node count it is rendered for.
	Chart string `json:"chart"`
	Nodes int    `json:"nodes"`
	// Refusals stop the adoption.
	Refusals []guard.Refusal `json:"refusals,omitempty"`
}

// CheckCiliumInstall checks a cluster with no CNI for Ichor's Cilium, for
// the adoption's plan: KubePrism on port 7445 and healthy on every machine
// and a pod CIDR on every Node (Cilium's kubernetes IPAM takes each Node's).
func CheckCiliumInstall(live *CiliumLive, kubePrism map[string]KubePrism) *CiliumInstall {
	return checkCiliumInstall(live, kubePrism, againAdopt, otherCNIAdopt)
}

// CheckCiliumBootstrap is the same check for `ichor cni bootstrap` (a
// cluster with no pod network, before `helm install` of Ichor), whose ways
// out name that command.
func CheckCiliumBootstrap(live *CiliumLive, kubePrism map[string]KubePrism) *CiliumInstall {
	const again = "`ichor cni bootstrap --plan`"

	return checkCiliumInstall(live, kubePrism, again,
		"that CNI gives the cluster a pod network already: install Ichor without `ichor cni bootstrap` "+
			"(Ichor never runs Cilium beside another CNI); remove its DaemonSet first if it is a leftover, then run "+again+" again")
}

func checkCiliumInstall(live *CiliumLive, kubePrism map[string]KubePrism, again, otherCNI string) *CiliumInstall {
	ci := &CiliumInstall{Chart: release.DefaultCiliumVersion, Nodes: live.Nodes, Refusals: checkOtherCNIs(live, otherCNI)}
	ci.Refusals = append(ci.Refusals, checkKubePrism(kubePrism, again)...)

	if live.Nodes == 0 {
		ci.Refusals = append(ci.Refusals, guard.Refusal{
			Field: cniField, Rule: "the cluster has no Node yet", WayOut: "wait until the machines have joined (kubectl get nodes), then run " + again + " again",
		})
	}

	if len(live.NoPodCIDR) > 0 {
		ci.Refusals = append(ci.Refusals, guard.Refusal{
			Field: cniField,
			Rule:  fmt.Sprintf("Node(s) %s have no pod CIDR (spec.podCIDR): Ichor's Cilium allocates pod addresses from each Node's (ipam.mode kubernetes)", strings.Join(live.NoPodCIDR, ", ")),
			WayOut: "let the controller manager allocate Node CIDRs (Talos's default, cluster.controllerManager allocate-node-cidrs), " +
				"then run " + again + " again",
		})
	}

	return ci
}

func portText(p int) string {
	if p == 0 {
		return "off"
	}

	return "port " + strconv.Itoa(p)
}

// diff renders the chart with Ichor's values and with the chart's own
// defaults in place of the Ichor-owned ones, and compares each rendered
// object with the live one.
func (t *Takeover) diff(ctx context.Context, in TakeoverInput, get func(context.Context, *unstructured.Unstructured) (*unstructured.Unstructured, error)) error {
	opts := cilium.Options{
		Version: t.Chart, KubernetesVersion: strings.TrimPrefix(in.KubernetesVersion, "v"),
		Choices:    ciliumvalues.Choices{Tunnel: t.Tunnel, KubeProxy: in.KubeProxy, Nodes: t.Nodes},
		UserValues: t.UserValues,
	}

	want, err := cilium.Render(ctx, opts)
	if err != nil {
		return err
	}

	// The parts the Ichor-owned values decide: those that change when the
	// owned keys are left to the chart's defaults, or when the choices they
	// follow (tunnel, kube-proxy mode) are the other ones.
	bare, err := cilium.RenderWithoutOwned(ctx, opts)
	if err != nil {
		return err
	}

	flipped := opts
	flipped.Choices.Tunnel, flipped.Choices.KubeProxy = ciliumvalues.TunnelGeneve, ichorv1alpha1.KubeProxyReplaced

	if t.Tunnel == ciliumvalues.TunnelGeneve {
		flipped.Choices.Tunnel = ciliumvalues.TunnelVXLAN
	}

	if in.KubeProxy == ichorv1alpha1.KubeProxyReplaced {
		flipped.Choices.KubeProxy = ichorv1alpha1.KubeProxyEnabled
	}

	alt, err := cilium.Render(ctx, flipped)
	if err != nil {
		return err
	}

	wantObjs, err := decodeObjects(want.Manifest)
	if err != nil {
		return err
	}

	others := map[string][]*unstructured.Unstructured{}

	for _, m := range []string{bare.Manifest, alt.Manifest} {
		objs, err := decodeObjects(m)
		if err != nil {
			return err
		}

		for _, o := range objs {
			others[objectID(o)] = append(others[objectID(o)], o)
		}
	}

	rendered := map[string]bool{}

	for _, o := range wantObjs {
		id := objectID(o)
		rendered[id] = true

		cur, err := get(ctx, o)
		if err != nil {
			return fmt.Errorf("reading %s: %w", id, err)
		}

		if cur == nil {
			t.Differences = append(t.Differences, ObjectDiff{Object: id, Missing: true})

			continue
		}

		paths := DiffObject(o.Object, cur.Object)
		if len(paths) == 0 {
			continue
		}

		d := ObjectDiff{Object: id, Paths: paths}

		ownedPaths := map[string]bool{}
		for _, b := range others[id] {
			for _, p := range DiffObject(o.Object, b.Object) {
				ownedPaths[p] = true
			}
		}

		for _, p := range paths {
			if ownedPaths[p] {
				d.Owned = append(d.Owned, p)
			}
		}

		t.Differences = append(t.Differences, d)
	}

	for _, f := range in.Foreign {
		if !rendered[f] && !strings.HasPrefix(f, "Namespace ") {
			t.LeftOver = append(t.LeftOver, f)
		}
	}

	return nil
}

// PriorReleaseSecret is the Secret, in the adoption's namespace, that keeps
// the foreign Helm release's records after the takeover (architecture,
// "Cilium", "Takeover"): a key per record holding its release data as Helm
// stored it, and one with its labels.
const PriorReleaseSecret = "ichor-cilium-prior-release" //nolint:gosec // a Secret's name, not a credential

// priorRelease reads the newest of the foreign release's records: it must
// be deployed, and its values, without the Ichor-owned keys, are the user's
// layer the takeover keeps.
func (t *Takeover) priorRelease(live *CiliumLive) error {
	var (
		newest  *corev1.Secret
		version int
	)

	for i := range live.HelmRecords {
		r := &live.HelmRecords[i]
		if v, _ := strconv.Atoi(r.Labels["version"]); newest == nil || v > version {
			newest, version = r, v
		}
	}

	if st := newest.Labels["status"]; st != "deployed" {
		return fmt.Errorf("the newest record of Helm release %s/%s (%s) is %q, not deployed: Ichor takes over a release at rest", cilium.Namespace, cilium.ReleaseName, newest.Name, st)
	}

	rel, err := DecodeHelmRecord(newest.Data["release"])
	if err != nil {
		return fmt.Errorf("the record %s of Helm release %s/%s does not decode: %w", newest.Name, cilium.Namespace, cilium.ReleaseName, err)
	}

	t.PriorRelease = live.helmRecordNames()
	t.UserValues, t.DroppedOwned = ciliumvalues.StripOwned(rel.Config)

	if len(t.UserValues) == 0 {
		t.UserValues = nil
	}

	return nil
}

// DecodeHelmRecord reads a record of Helm's Secrets driver: the release as
// JSON, gzipped, base64-encoded (helm.sh/helm/v3 pkg/storage/driver/util.go,
// encodeRelease and decodeRelease).
func DecodeHelmRecord(data []byte) (*helmrelease.Release, error) {
	b, err := base64.StdEncoding.DecodeString(string(data))
	if err != nil {
		return nil, err
	}

	if len(b) > 2 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}

		if b, err = io.ReadAll(zr); err != nil {
			return nil, err
		}
	}

	rel := &helmrelease.Release{}
	if err := json.Unmarshal(b, rel); err != nil {
		return nil, err
	}

	return rel, nil
}

// checkDiff refuses the differences the person has not accepted.
func (t *Takeover) checkDiff(in TakeoverInput) {
	paths, owned, missing := t.Changes()

	for _, d := range t.Differences {
		if d.Object != "ConfigMap "+cilium.Namespace+"/"+cni.CiliumConfigMap {
			continue
		}

		for _, p := range d.Paths {
			for _, k := range neverAccepted {
				if p == "data."+k {
					t.Refusals = append(t.Refusals, guard.Refusal{
						Field: cniField, Rule: fmt.Sprintf("the takeover would change cilium-config's %s on the running data plane, which no flag accepts", k),
						WayOut: "bring Cilium to Ichor's setting of it first (`ichor adopt --plan` lists the differences), then run `ichor adopt --plan` again",
					})
				}
			}
		}
	}

	if (paths > 0 || missing > 0) && !in.AcceptDiff {
		t.Refusals = append(t.Refusals, guard.Refusal{
			Field: cniField,
			Rule: fmt.Sprintf("Ichor's render of Cilium %s differs from the running Cilium: %d object(s) to create and %d field(s) to change (listed above)",
				t.Chart, missing, paths),
			WayOut: "add --accept-cilium-diff to take Cilium over with these differences applied by the takeover",
		})
	}

	if owned > 0 && !in.AcceptChanges {
		t.Refusals = append(t.Refusals, guard.Refusal{
			Field:  cniField,
			Rule:   fmt.Sprintf("%d of the changed field(s) are decided by Ichor-owned values (marked owned above): they change how the running data plane works", owned),
			WayOut: "add --accept-cilium-changes (with --accept-cilium-diff) to accept them",
		})
	}
}

// objectID is "Kind namespace/name" (a Namespace, or a cluster-scoped
// object, has no namespace part).
func objectID(o *unstructured.Unstructured) string {
	id := o.GetName()
	if ns := o.GetNamespace(); ns != "" {
		id = ns + "/" + id
	}

	return o.GetKind() + " " + id
}

// decodeObjects reads a multi-document manifest.
func decodeObjects(manifest string) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(manifest), 4096)

	var out []*unstructured.Unstructured

	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}

			return nil, fmt.Errorf("the rendered Cilium manifest does not parse: %w", err)
		}

		if len(obj) == 0 {
			continue
		}

		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

// DiffObject lists the fields of want whose value cur does not have: every
// leaf of want (a list is compared element by element when the lengths
// agree, whole otherwise) outside metadata, and metadata's labels and
// annotations. Fields only cur has (defaults the API server filled, status)
// are not differences. A Secret's stringData is compared as its data.
func DiffObject(want, cur map[string]any) []string {
	w, c := normalize(want), normalize(cur)

	var out []string

	for k, v := range w {
		switch k {
		case "status", "apiVersion", "kind":
			continue
		case "metadata":
			wm, _ := v.(map[string]any)
			cm, _ := c[k].(map[string]any)

			for _, sub := range []string{"labels", "annotations"} {
				if wv, ok := wm[sub]; ok {
					out = diffValue("metadata."+sub, wv, cm[sub], out)
				}
			}

			continue
		}

		out = diffValue(k, v, c[k], out)
	}

	slices.Sort(out)

	return out
}

func diffValue(path string, want, cur any, out []string) []string {
	switch w := want.(type) {
	case nil:
		return out
	case map[string]any:
		cm, _ := cur.(map[string]any)
		if len(w) == 0 {
			return out
		}

		for k, v := range w {
			out = diffValue(path+"."+k, v, cm[k], out)
		}

		return out
	case []any:
		cl, _ := cur.([]any)
		if len(cl) != len(w) {
			return append(out, path)
		}

		for i := range w {
			out = diffValue(path+"["+strconv.Itoa(i)+"]", w[i], cl[i], out)
		}

		return out
	}

	if cur == nil && zeroValue(want) {
		// The API server drops a field at its zero value (omitempty): the
		// object holds what the render asks for.
		return out
	}

	if cur == nil || (!equalJSON(want, cur) && !sameQuantity(path, want, cur)) {
		return append(out, path)
	}

	return out
}

func zeroValue(v any) bool {
	switch x := v.(type) {
	case bool:
		return !x
	case float64:
		return x == 0
	case string:
		return x == ""
	}

	return false
}

// sameQuantity compares resource quantities by value ("1" is "1000m"): the
// API server stores a quantity in its canonical form.
func sameQuantity(path string, want, cur any) bool {
	if !strings.Contains(path, ".limits.") && !strings.Contains(path, ".requests.") {
		return false
	}

	// A chart may write a quantity as a YAML number (cpu: 1).
	text := func(v any) (string, bool) {
		switch x := v.(type) {
		case string:
			return x, true
		case float64:
			return strconv.FormatFloat(x, 'f', -1, 64), true
		}

		return "", false
	}

	ws, ok1 := text(want)
	cs, ok2 := text(cur)

	if !ok1 || !ok2 {
		return false
	}

	wq, err1 := resource.ParseQuantity(ws)
	cq, err2 := resource.ParseQuantity(cs)

	return err1 == nil && err2 == nil && wq.Cmp(cq) == 0
}

func equalJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)

	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// normalize gives both sides one spelling: a JSON round trip (numbers as
// float64), and a Secret's stringData moved into data, base64-encoded as the
// API server stores it.
func normalize(obj map[string]any) map[string]any {
	data, err := json.Marshal(obj)
	if err != nil {
		return obj
	}

	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		return obj
	}

	if sd, ok := out["stringData"].(map[string]any); ok {
		d, _ := out["data"].(map[string]any)
		if d == nil {
			d = map[string]any{}
		}

		for k, v := range sd {
			if s, ok := v.(string); ok {
				d[k] = base64.StdEncoding.EncodeToString([]byte(s))
			}
		}

		out["data"] = d
		delete(out, "stringData")
	}

	return out
}

// GetLive is CheckCiliumTakeover's reader over a client: the live object of
// a rendered one, a namespaced one without a namespace read in kube-system
// (where the release goes).
func GetLive(c client.Client) func(context.Context, *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	return func(ctx context.Context, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		ns := o.GetNamespace()
		if ns == "" {
			namespaced, err := c.IsObjectNamespaced(o)
			if err != nil {
				return nil, err
			}

			if namespaced {
				ns = cilium.Namespace
			}
		}

		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(o.GroupVersionKind())

		switch err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: o.GetName()}, cur); {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, err
		}

		return cur, nil
	}
}

// TakeoverAnnotations are the annotations of a cluster whose Cilium the
// adoption takes over.
func TakeoverAnnotations() map[string]string {
	return map[string]string{ichorv1alpha1.CNIBootstrapAnnotation: ichorv1alpha1.CNIBootstrapTakeover}
}
