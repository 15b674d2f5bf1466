package config_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoMachineryDependency: the mirror types are imported by every consumer
// of the CRD types, so they must not pull Talos machinery in, not even
// transitively (the conversions live in the convert subpackage).
func TestNoMachineryDependency(t *testing.T) {
	t.Parallel()

	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}

	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list returned %d packages; expected the package's dependencies", len(deps))
	}

	for _, dep := range deps {
		if strings.HasPrefix(dep, "github.com/siderolabs/") || strings.HasPrefix(dep, "github.com/cosi-project/") {
			t.Errorf("the mirror package depends on %s", dep)
		}
	}
}
