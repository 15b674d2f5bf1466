package configpatch_test

import (
	"slices"
	"testing"

	mirror "github.com/maeshinshin/ichor/contracts/api/v1alpha1/config"
	"github.com/maeshinshin/ichor/contracts/pkg/configpatch"
)

// TestEveryKindIsReviewed: each mirrored kind is either allowed or denied with
// a reason, never both, and the table names no kind machinery lacks.
func TestEveryKindIsReviewed(t *testing.T) {
	t.Parallel()

	mirrored := map[string]bool{}

	for _, k := range mirror.Kinds {
		mirrored[k.Kind] = true

		reason, denied := configpatch.Denied[k.Kind]
		allowed := configpatch.IsAllowed(k.Kind)

		switch {
		case allowed && denied:
			t.Errorf("%s is both allowed and denied", k.Kind)
		case !allowed && !denied:
			t.Errorf("%s is neither allowed nor denied", k.Kind)
		case denied && reason == "":
			t.Errorf("%s is denied without a reason", k.Kind)
		}
	}

	for _, k := range configpatch.Allowed {
		if !mirrored[k] {
			t.Errorf("allowed kind %s is not a mirrored kind", k)
		}
	}

	for k := range configpatch.Denied {
		if !mirrored[k] {
			t.Errorf("denied kind %s is not a mirrored kind", k)
		}
	}

	if !slices.IsSorted(configpatch.Allowed) {
		t.Error("Allowed is not sorted")
	}
}

// TestSecretBearingKindsAreDenied: a kind whose secret field is its purpose
// (a registry password, a WireGuard key, a CA key) is not patchable.
func TestSecretBearingKindsAreDenied(t *testing.T) {
	t.Parallel()

	for _, k := range []string{"RegistryAuthConfig", "WireguardConfig", "KubeAPIServerCAConfig", "KubeAggregatorCAConfig", "KubeServiceAccountConfig", "KubeEtcdEncryptionConfig", "DiscoveryIdentityConfig", "SideroLinkConfig", "HCloudVIPConfig", "v1alpha1"} {
		if configpatch.IsAllowed(k) {
			t.Errorf("%s must not be patchable", k)
		}
	}
}
