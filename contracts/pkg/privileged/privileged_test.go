package privileged_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	ichorv1alpha1 "github.com/maeshinshin/ichor/contracts/api/v1alpha1"
	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/configmeta"
	"github.com/maeshinshin/ichor/contracts/pkg/configpatch"
	"github.com/maeshinshin/ichor/contracts/pkg/privileged"
)

// listed is the rule's own list (issue 17, point 1, and the legacy
// document's fields for the same settings), written out independently of
// the table: each case is a document as a patch or the legacy document
// carries it, and the path the table must report for it. Removing an entry
// from the table fails its case.
var listed = []struct {
	kind string
	json string
	want string
}{
	// Whole kinds, even empty.
	{"KubeInlineManifestConfig", `{"name":"evil","manifest":"kind: ClusterRoleBinding"}`, "KubeInlineManifestConfig"},
	{"KubeInlineManifestConfig", `{}`, "KubeInlineManifestConfig"},
	{"KubeExternalManifestConfig", `{"name":"m","url":"https://example.com/m.yaml"}`, "KubeExternalManifestConfig"},
	{"ExtensionServiceConfig", `{"name":"tailscale","environment":["A=b"]}`, "ExtensionServiceConfig"},
	{"KubeTalosAPIAccessConfig", `{"allowedRoles":["os:admin"]}`, "KubeTalosAPIAccessConfig"},
	{"TrustedRootsConfig", `{"name":"corp","certificates":"-----BEGIN CERTIFICATE-----"}`, "TrustedRootsConfig"},
	{"EnvironmentConfig", `{"variables":{"GODEBUG":"x"}}`, "EnvironmentConfig"},
	{"EtcFileConfig", `{"name":"hosts","contents":"x"}`, "EtcFileConfig"},
	{"ContainerConfig", `{"name":"c","image":"evil:latest"}`, "ContainerConfig"},
	// The control plane's components and the kubelet.
	{"KubeAPIServerConfig", `{"image":"evil/apiserver"}`, "KubeAPIServerConfig:image"},
	{"KubeAPIServerConfig", `{"extraArgs":{"authorization-mode":{"value":"AlwaysAllow"}}}`, "KubeAPIServerConfig:extraArgs"},
	{"KubeAPIServerConfig", `{"env":{"HTTPS_PROXY":"x"}}`, "KubeAPIServerConfig:env"},
	{"KubeControllerManagerConfig", `{"image":"evil/kcm"}`, "KubeControllerManagerConfig:image"},
	{"KubeControllerManagerConfig", `{"extraArgs":{"a":{"value":"b"}}}`, "KubeControllerManagerConfig:extraArgs"},
	{"KubeControllerManagerConfig", `{"env":{"A":"b"}}`, "KubeControllerManagerConfig:env"},
	{"KubeSchedulerConfig", `{"image":"evil/scheduler"}`, "KubeSchedulerConfig:image"},
	{"KubeSchedulerConfig", `{"extraArgs":{"a":{"values":["b","c"]}}}`, "KubeSchedulerConfig:extraArgs"},
	{"KubeSchedulerConfig", `{"env":{"A":"b"}}`, "KubeSchedulerConfig:env"},
	{"KubeletConfig", `{"image":"evil/kubelet"}`, "KubeletConfig:image"},
	{"KubeletConfig", `{"extraArgs":{"a":{"value":"b"}}}`, "KubeletConfig:extraArgs"},
	{"KubeProxyConfig", `{"image":"evil/proxy"}`, "KubeProxyConfig:image"},
	{"KubeProxyConfig", `{"extraArgs":{"a":{"value":"b"}}}`, "KubeProxyConfig:extraArgs"},
	// The legacy document.
	{"v1alpha1", `{"machine":{"kubelet":{"image":"evil"}}}`, "v1alpha1:machine.kubelet.image"},
	{"v1alpha1", `{"machine":{"kubelet":{"extraArgs":{"a":{"value":"b"}}}}}`, "v1alpha1:machine.kubelet.extraArgs"},
	{"v1alpha1", `{"machine":{"kubelet":{"extraMounts":[{"source":"/","destination":"/host"}]}}}`, "v1alpha1:machine.kubelet.extraMounts"},
	{"v1alpha1", `{"machine":{"env":{"A":"b"}}}`, "v1alpha1:machine.env"},
	{"v1alpha1", `{"machine":{"files":[{"path":"/var/x","content":"y"}]}}`, "v1alpha1:machine.files"},
	{"v1alpha1", `{"machine":{"features":{"kubernetesTalosAPIAccess":{"enabled":true}}}}`, "v1alpha1:machine.features.kubernetesTalosAPIAccess"},
	{"v1alpha1", `{"cluster":{"apiServer":{"image":"evil"}}}`, "v1alpha1:cluster.apiServer.image"},
	{"v1alpha1", `{"cluster":{"apiServer":{"extraArgs":{"a":{"value":"b"}}}}}`, "v1alpha1:cluster.apiServer.extraArgs"},
	{"v1alpha1", `{"cluster":{"apiServer":{"extraVolumes":[{"hostPath":"/","mountPath":"/host"}]}}}`, "v1alpha1:cluster.apiServer.extraVolumes"},
	{"v1alpha1", `{"cluster":{"apiServer":{"env":{"A":"b"}}}}`, "v1alpha1:cluster.apiServer.env"},
	{"v1alpha1", `{"cluster":{"controllerManager":{"image":"evil"}}}`, "v1alpha1:cluster.controllerManager.image"},
	{"v1alpha1", `{"cluster":{"controllerManager":{"extraArgs":{"a":{"value":"b"}}}}}`, "v1alpha1:cluster.controllerManager.extraArgs"},
	{"v1alpha1", `{"cluster":{"controllerManager":{"extraVolumes":[{"hostPath":"/"}]}}}`, "v1alpha1:cluster.controllerManager.extraVolumes"},
	{"v1alpha1", `{"cluster":{"controllerManager":{"env":{"A":"b"}}}}`, "v1alpha1:cluster.controllerManager.env"},
	{"v1alpha1", `{"cluster":{"scheduler":{"image":"evil"}}}`, "v1alpha1:cluster.scheduler.image"},
	{"v1alpha1", `{"cluster":{"scheduler":{"extraArgs":{"a":{"value":"b"}}}}}`, "v1alpha1:cluster.scheduler.extraArgs"},
	{"v1alpha1", `{"cluster":{"scheduler":{"extraVolumes":[{"hostPath":"/"}]}}}`, "v1alpha1:cluster.scheduler.extraVolumes"},
	{"v1alpha1", `{"cluster":{"scheduler":{"env":{"A":"b"}}}}`, "v1alpha1:cluster.scheduler.env"},
	{"v1alpha1", `{"cluster":{"proxy":{"image":"evil"}}}`, "v1alpha1:cluster.proxy.image"},
	{"v1alpha1", `{"cluster":{"proxy":{"extraArgs":{"a":{"value":"b"}}}}}`, "v1alpha1:cluster.proxy.extraArgs"},
	{"v1alpha1", `{"cluster":{"etcd":{"image":"evil"}}}`, "v1alpha1:cluster.etcd.image"},
	{"v1alpha1", `{"cluster":{"etcd":{"extraArgs":{"a":{"value":"b"}}}}}`, "v1alpha1:cluster.etcd.extraArgs"},
	{"v1alpha1", `{"cluster":{"inlineManifests":[{"name":"evil","contents":"x"}]}}`, "v1alpha1:cluster.inlineManifests"},
	{"v1alpha1", `{"cluster":{"extraManifests":["https://example.com/m.yaml"]}}`, "v1alpha1:cluster.extraManifests"},
	{"v1alpha1", `{"cluster":{"extraManifestHeaders":{"A":"b"}}}`, "v1alpha1:cluster.extraManifestHeaders"},
	{"v1alpha1", `{"cluster":{"externalCloudProvider":{"manifests":["https://example.com/m.yaml"]}}}`, "v1alpha1:cluster.externalCloudProvider.manifests"},
}

// neighbours set fields of the same documents that are not privileged.
var neighbours = []struct{ kind, json string }{
	{"KubeAPIServerConfig", `{"certExtraSANs":["api.example.com"],"resources":{}}`},
	{"KubeControllerManagerConfig", `{"enabled":true}`},
	{"KubeSchedulerConfig", `{"enabled":true}`},
	{"KubeletConfig", `{"clusterDNS":["10.96.0.10"],"defaultRuntimeSeccompProfileEnabled":true}`},
	{"KubeProxyConfig", `{"mode":"nftables"}`},
	{"SysctlConfig", `{"params":{"vm.swappiness":"10"}}`},
	{"KubeNodeConfig", `{"labels":{"zone":"a"}}`},
	{"v1alpha1", `{"machine":{"kubelet":{"clusterDNS":["10.96.0.10"]},"sysctls":{"a":"b"},"features":{"rbac":true}}}`},
	{"v1alpha1", `{"cluster":{"apiServer":{"certSANs":["x"]},"proxy":{"mode":"ipvs"},"etcd":{"subnet":"10.0.0.0/8"}}}`},
}

func decode(t *testing.T, kind, js string) any {
	t.Helper()
	doc, ok := mirror.New(kind)
	if !ok {
		t.Fatalf("%s is not a mirrored kind", kind)
	}
	if err := json.Unmarshal([]byte(js), doc); err != nil {
		t.Fatalf("%s %s: %v", kind, js, err)
	}
	return doc
}

func paths(entries []privileged.Entry) []string {
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Path)
	}
	return out
}

// TestTableCoversEveryListedKindAndField checks each listed document and
// field, through InDocument and, for the kinds a patch may carry, through a
// TalosConfigPatch (InPatch, with the location the refusal names), and that
// configmeta reports the path as privileged.
func TestTableCoversEveryListedKindAndField(t *testing.T) {
	t.Parallel()
	for _, tc := range listed {
		doc := decode(t, tc.kind, tc.json)
		if got := paths(privileged.InDocument(tc.kind, doc)); !slices.Equal(got, []string{tc.want}) {
			t.Errorf("%s %s: InDocument found %q, want [%q]", tc.kind, tc.json, got, tc.want)
		}
		if !configmeta.Lookup(tc.want).Privileged {
			t.Errorf("configmeta.Lookup(%q).Privileged is false", tc.want)
		}
		if !configpatch.IsAllowed(tc.kind) {
			continue
		}
		var pd mirror.PatchDocument
		if !pd.SetDocument(doc) {
			t.Fatalf("%s does not fit a PatchDocument", tc.kind)
		}
		p := &ichorv1alpha1.TalosConfigPatch{Spec: ichorv1alpha1.TalosConfigPatchSpec{Documents: []mirror.PatchDocument{
			{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"a": "b"}}}, pd,
		}}}
		found := privileged.InPatch(p)
		if len(found) != 1 || found[0].Path != tc.want {
			t.Errorf("%s %s: InPatch found %v, want %s", tc.kind, tc.json, found, tc.want)
			continue
		}
		// The document's key is the one key of the PatchDocument's JSON form.
		var keys map[string]json.RawMessage
		b, err := json.Marshal(pd)
		if err != nil || json.Unmarshal(b, &keys) != nil || len(keys) != 1 {
			t.Fatalf("%s: PatchDocument JSON %s (%v)", tc.kind, b, err)
		}
		var key string
		for k := range keys {
			key = k
		}
		wantLoc := "spec.documents[1]." + key
		if f := strings.TrimPrefix(tc.want, tc.kind); f != "" {
			wantLoc += "." + strings.TrimPrefix(f, ":")
		}
		if found[0].Location != wantLoc {
			t.Errorf("%s: location %q, want %q", tc.want, found[0].Location, wantLoc)
		}
	}
}

// TestTableListsNothingElse keeps the table and the list above in step: an
// entry nobody listed is a decision nobody tested.
func TestTableListsNothingElse(t *testing.T) {
	t.Parallel()
	want := map[string]bool{}
	for _, tc := range listed {
		want[tc.want] = true
	}
	for _, e := range privileged.Entries() {
		if !want[e.Path] {
			t.Errorf("table entry %s has no case in the listed set", e.Path)
		}
		if e.Reason == "" {
			t.Errorf("table entry %s has no reason", e.Path)
		}
	}
}

// TestNeighboursAreNotPrivileged: other fields of the same documents pass.
func TestNeighboursAreNotPrivileged(t *testing.T) {
	t.Parallel()
	for _, tc := range neighbours {
		if got := privileged.InDocument(tc.kind, decode(t, tc.kind, tc.json)); len(got) != 0 {
			t.Errorf("%s %s: found %v, want nothing", tc.kind, tc.json, paths(got))
		}
	}
}

// TestEmptyDocumentsSetNoPrivilegedField: a field counts only when it is
// set, so no listed field may be a value the mirror always writes.
func TestEmptyDocumentsSetNoPrivilegedField(t *testing.T) {
	t.Parallel()
	for _, k := range mirror.Kinds {
		doc, _ := mirror.New(k.Kind)
		for _, e := range privileged.InDocument(k.Kind, doc) {
			if e.Field() != "" {
				t.Errorf("an empty %s sets %s", k.Kind, e.Path)
			}
		}
	}
}

// TestTablePathsExistInTheMirror: every entry names a mirrored kind and a
// field of its mirror type, so a renamed field cannot drop out silently.
func TestTablePathsExistInTheMirror(t *testing.T) {
	t.Parallel()
	for _, e := range privileged.Entries() {
		doc, ok := mirror.New(e.Kind())
		if !ok {
			t.Errorf("%s: no mirrored kind %q", e.Path, e.Kind())
			continue
		}
		typ := reflect.TypeOf(doc).Elem()
		if e.Field() == "" {
			continue
		}
		for _, seg := range strings.Split(e.Field(), ".") {
			for typ.Kind() == reflect.Pointer {
				typ = typ.Elem()
			}
			next, found := fieldByJSON(typ, seg)
			if !found {
				t.Errorf("%s: %s has no field %q", e.Path, typ.Name(), seg)
				break
			}
			typ = next
		}
	}
}

func fieldByJSON(typ reflect.Type, name string) (reflect.Type, bool) {
	if typ.Kind() != reflect.Struct {
		return nil, false
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag == name {
			return f.Type, true
		}
	}
	return nil, false
}

func TestLookup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path          string
		is, contains  bool
		wantEntryPath string
	}{
		{"KubeInlineManifestConfig", true, true, "KubeInlineManifestConfig"},
		{"KubeInlineManifestConfig:manifest", true, true, "KubeInlineManifestConfig"},
		{"KubeAPIServerConfig:extraArgs{*}", true, true, "KubeAPIServerConfig:extraArgs"},
		{`KubeAPIServerConfig:extraArgs["feature-gates"]`, true, true, "KubeAPIServerConfig:extraArgs"},
		{"v1alpha1:cluster.apiServer.extraArgs.feature-gates", true, true, "v1alpha1:cluster.apiServer.extraArgs"},
		{"v1alpha1:machine.files[].content", true, true, "v1alpha1:machine.files"},
		{"KubeAPIServerConfig:certExtraSANs", false, false, ""},
		{"KubeAPIServerConfig", false, true, ""},
		{"v1alpha1:cluster.apiServer", false, true, ""},
		{"v1alpha1:machine.kubeletX", false, false, ""},
		{"KubeletConfig:imageX", false, false, ""},
		{"SysctlConfig", false, false, ""},
	} {
		e, ok := privileged.Lookup(tc.path)
		if ok != tc.is || e.Path != tc.wantEntryPath {
			t.Errorf("Lookup(%q) = %q, %v; want %q, %v", tc.path, e.Path, ok, tc.wantEntryPath, tc.is)
		}
		if got := privileged.Contains(tc.path); got != tc.contains {
			t.Errorf("Contains(%q) = %v, want %v", tc.path, got, tc.contains)
		}
	}
}

func TestOfCluster(t *testing.T) {
	t.Parallel()
	patch := func(name, cluster string, docs ...mirror.PatchDocument) ichorv1alpha1.TalosConfigPatch {
		p := ichorv1alpha1.TalosConfigPatch{Spec: ichorv1alpha1.TalosConfigPatchSpec{ClusterName: cluster, Documents: docs}}
		p.Name = name
		return p
	}
	got := privileged.OfCluster("prod", []ichorv1alpha1.TalosConfigPatch{
		patch("z-kubelet", "prod", mirror.PatchDocument{KubeletConfig: &mirror.KubeletConfig{Image: "x", ExtraArgs: map[string]mirror.ArgValue{"a": {Value: "b"}}}}),
		patch("tuning", "prod", mirror.PatchDocument{SysctlConfig: &mirror.SysctlConfig{Params: map[string]string{"a": "b"}}}),
		patch("a-roots", "prod", mirror.PatchDocument{TrustedRootsConfig: &mirror.TrustedRootsConfig{Name: "corp"}}),
		patch("other", "staging", mirror.PatchDocument{EtcFileConfig: &mirror.EtcFileConfig{Name: "x"}}),
	})
	want := []privileged.Patch{
		{Name: "a-roots", Paths: []string{"TrustedRootsConfig"}},
		{Name: "z-kubelet", Paths: []string{"KubeletConfig:extraArgs", "KubeletConfig:image"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("OfCluster = %+v, want %+v", got, want)
	}
}
