package testenv

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// CiliumNetworkPolicyCRD reads Cilium's own CiliumNetworkPolicy CRD (the
// cilium.io/v2 one its operator installs) out of the Go module of Cilium
// version (the go command fetches it once into the module cache and checks
// its sum), so that the API server validates what a test applies with
// Cilium's schema.
func CiliumNetworkPolicyCRD(t *testing.T, version string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()

	out, err := exec.CommandContext(t.Context(), "go", "mod", "download", "-json", "github.com/cilium/cilium@"+version).Output() //nolint:gosec // a version the test names, run by the go command
	if err != nil {
		t.Fatalf("go mod download github.com/cilium/cilium@%s: %v", version, err)
	}

	var mod struct{ Dir string }
	Must(t, json.Unmarshal(out, &mod))

	data, err := os.ReadFile(filepath.Join(mod.Dir, "pkg/k8s/apis/cilium.io/client/crds/v2/ciliumnetworkpolicies.yaml"))
	Must(t, err)

	crd := &apiextensionsv1.CustomResourceDefinition{}
	Must(t, yaml.Unmarshal(data, crd))

	if crd.Name != "ciliumnetworkpolicies.cilium.io" {
		t.Fatalf("Cilium %s's CRD is %s, want ciliumnetworkpolicies.cilium.io", version, crd.Name)
	}

	return crd
}
