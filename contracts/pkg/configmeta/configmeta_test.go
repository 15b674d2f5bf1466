package configmeta_test

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/configmeta"
)

func TestLookup(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		path string
		want configmeta.Meta
	}{
		{"NoSuchKind:foo", configmeta.Meta{RebootRequired: true}},
		{"", configmeta.Meta{RebootRequired: true}},
		{"SysctlConfig:params{*}", configmeta.Meta{Known: true, Since: "v1.14"}},
		{"SysctlConfig", configmeta.Meta{Known: true, Since: "v1.14"}},
		{"LinkConfig:addresses[].address", configmeta.Meta{Known: true, Since: "v1.12"}},
		{"KubeAPIServerConfig:extraArgs{*}", configmeta.Meta{Known: true, APIServerRestart: true, Since: "v1.14", Privileged: true}},
		{"VolumeConfig:provisioning.maxSize", configmeta.Meta{Known: true, InstallTimeOnly: true, Since: "v1.8"}},
		{"v1alpha1:machine.files[].content", configmeta.Meta{Known: true, RebootRequired: true, Since: "v1.0", Privileged: true}},
		{"v1alpha1:machine.install.disk", configmeta.Meta{Known: true, InstallTimeOnly: true, Since: "v1.0"}},
		{"v1alpha1:machine.sysctls{*}", configmeta.Meta{Known: true, Since: "v1.0"}},
		{"v1alpha1:cluster.apiServer.extraArgs{*}", configmeta.Meta{Known: true, APIServerRestart: true, Since: "v1.0", Privileged: true}},
		{"v1alpha1:cluster.proxy.mode", configmeta.Meta{Known: true, Since: "v1.0"}},
		{"v1alpha1:machine.features.rbac", configmeta.Meta{Known: true, RebootRequired: true, Since: "v1.0"}},
		{"v1alpha1:machine.features.kubePrism.port", configmeta.Meta{Known: true, Since: "v1.0"}},
		{"v1alpha1:machine.systemDiskEncryption.state.provider", configmeta.Meta{Known: true, RebootRequired: true, InstallTimeOnly: true, Since: "v1.0"}},
		// A prefix only counts at a path boundary.
		{"v1alpha1:machine.kubeletX", configmeta.Meta{Known: true, RebootRequired: true, Since: "v1.0"}},
		{"KubeletConfigX:foo", configmeta.Meta{RebootRequired: true}},
		// Privileged comes from contracts/pkg/privileged.
		{"KubeInlineManifestConfig:manifest", configmeta.Meta{Known: true, Since: "v1.14", Privileged: true}},
		{"KubeAPIServerConfig:certExtraSANs", configmeta.Meta{Known: true, APIServerRestart: true, Since: "v1.14"}},
	} {
		if got := configmeta.Lookup(tc.path); got != tc.want {
			t.Errorf("Lookup(%q) = %+v, want %+v", tc.path, got, tc.want)
		}
	}
}

var versionRE = regexp.MustCompile(`^v1\.(\d+)$`)

// TestEveryKindIsCovered checks that every mirrored kind has an entry, so no
// mirrored field falls back to the reboot default by omission.
func TestEveryKindIsCovered(t *testing.T) {
	t.Parallel()

	for _, k := range mirror.Kinds {
		m := configmeta.Lookup(k.Kind + ":anything")
		if !m.Known {
			t.Errorf("kind %s has no entry", k.Kind)
		}

		if !versionRE.MatchString(m.Since) {
			t.Errorf("kind %s: Since %q is not a Talos minor version", k.Kind, m.Since)
		}
	}
}

// TestEveryPathExists checks that every table path names a real field of the
// mirror types, or a field the mirror leaves out on purpose.
func TestEveryPathExists(t *testing.T) {
	t.Parallel()

	absent := map[string]bool{}
	for _, p := range mirror.SecretFields {
		absent[p] = true
	}

	for p := range mirror.DroppedFields {
		absent[p] = true
	}

	for _, p := range configmeta.Paths() {
		kind, path, _ := strings.Cut(p, ":")

		doc, ok := mirror.New(kind)
		if !ok {
			t.Errorf("%s: unknown kind %s", p, kind)

			continue
		}

		if path == "" || absent[p] {
			continue
		}

		if !resolves(reflect.TypeOf(doc), path) {
			t.Errorf("%s: no such field in the mirror type %T", p, doc)
		}
	}
}

func resolves(t reflect.Type, path string) bool {
	for seg := range strings.SplitSeq(path, ".") {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}

		if t.Kind() != reflect.Struct {
			return false
		}

		found := false

		for i := range t.NumField() {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name == seg {
				t, found = t.Field(i).Type, true

				break
			}
		}

		if !found {
			return false
		}
	}

	return true
}
